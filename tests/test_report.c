// test_report.c — `tiertrain report` (src/report_html.c) on three inputs, its page read back
// as text: a complete run's --log (and its --trace), the same log cut short as a crash leaves
// it, and the JSON line of `tiertrain plan`. Each chart's <svg> must be there with as many
// values as the input holds (12 steps, 3 evaluations), the page must fetch nothing, and bad
// input is refused in one line. A log is input like any other: markup in its strings comes out
// as text, and numbers no run could log draw no NaN or inf coordinates. test_report_browser.c
// renders the same pages in Chromium.
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "report_check.h"
#include "trace.h"
#include "testutil.h"

static char *tmp;

static void setup(void) { tmp = tu_tmpdir("report"); }
static void teardown(void) {
    tu_rm_rf(tmp);
    free(tmp);
}

START_TEST(complete_run) {
    char html[1200];
    rc_make_run(tmp);
    char *page = rc_report(tmp, "run.jsonl", 1, html, sizeof html);
    rc_check_charts(page, RC_STEPS, RC_EVALS, 1, 1);
    ck_assert_msg(strstr(page, "This run is bound by <b>"), "no binding sentence");
    // the run had no calibration profile (rc_make_run points XDG_CACHE_HOME at an empty folder)
    ck_assert_msg(strstr(page, "The floor comes from built-in rates, not this machine's"), "no word on the rates");
    ck_assert_msg(strstr(page, "<table id=\"tiers\">") && strstr(page, "<table id=\"links\">") &&
                      strstr(page, "<table id=\"waits\">"), "no tier tables");
    rc_check_self_contained(page);
    free(page);
}
END_TEST

// The first `lines` lines of rc_make_run's log and `extra` bytes of the next into tmp/name.
static void cut_log(const char *name, int lines, size_t extra) {
    char path[1200];
    snprintf(path, sizeof path, "%s/run.jsonl", tmp);
    char *log = tu_slurp(path), *p = log;
    ck_assert_ptr_nonnull(log);
    for (int k = 0; k < lines && p; k++) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL;
    ck_assert_ptr_nonnull(p);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    const size_t n = (size_t)(p - log) + extra;
    ck_assert(f && fwrite(log, 1, n, f) == n && fclose(f) == 0);
    free(log);
}

// A crash leaves the log without its summary, the last line maybe cut short.
START_TEST(partial_log) {
    char html[1200];
    rc_make_run(tmp);
    cut_log("partial.jsonl", 7, 20); // the plan line and the first 5 steps (with their evaluation), then half a line
    char *page = rc_report(tmp, "partial.jsonl", 0, html, sizeof html);
    ck_assert_int_eq(rc_chart_points(page, "loss"), 5 + 1);
    ck_assert_int_eq(rc_series_points(page, "training loss"), 5);
    ck_assert_int_eq(rc_series_points(page, "step time"), 5);
    ck_assert_msg(strstr(page, "The log ends after step 5 without its summary"), "no partial-log sentence");
    ck_assert_msg(strstr(page, "1 line not JSON (cut short?) skipped"), "the cut line is not reported");
    ck_assert_msg(!strstr(page, "id=\"time-split\""), "a time split without a summary");
    free(page);
}
END_TEST

// A log of 3 steps: the step axis labels each step once ("1 2 3", not quarters rounded to
// "1 2 2 3 3"), and the summary line counts in the singular where there is one.
START_TEST(short_run_axis) {
    char html[1200];
    rc_make_run(tmp);
    cut_log("short.jsonl", 4, 0); // the plan line and steps 1..3
    char *page = rc_report(tmp, "short.jsonl", 0, html, sizeof html);
    const char *svg = strstr(page, "<svg id=\"loss\""), *end = svg ? strstr(svg, "</svg>") : NULL;
    ck_assert_msg(svg && end, "no loss chart");
    char labels[64] = "";
    const char *key = "class=\"tick\" text-anchor=\"middle\">";
    for (const char *t = strstr(svg, key); t && t < end; t = strstr(t + 1, key))
        snprintf(labels + strlen(labels), sizeof labels - strlen(labels), "%.*s ", (int)strcspn(t + strlen(key), "<"),
                 t + strlen(key));
    ck_assert_str_eq(labels, "1 2 3 ");
    ck_assert_msg(strstr(page, "3 steps logged (no summary: partial), 0 evaluations, 0 checkpoints."), "%s", page);
    free(page);
}
END_TEST

// plan's JSON line: the memory picture before any training.
START_TEST(plan_line) {
    char html[1200], log[1200];
    snprintf(log, sizeof log, "%s/plan.json", tmp);
    char *argv[] = {(char *)tu_binary(), "plan", "--model", "small", "--device", "cpu", "--params", "host",
                    "--optimizer", "nvme", "--log", log, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_msg(tu_run(argv, NULL, &out, &err) == 0, "%s", err);
    free(out);
    free(err);
    char *page = rc_report(tmp, "plan.json", 0, html, sizeof html);
    ck_assert_msg(!strstr(page, "id=\"loss\""), "a loss chart for a plan");
    ck_assert_msg(rc_chart_points(page, "memory") >= 4 && rc_chart_points(page, "memory-host") >= 2 &&
                      rc_chart_points(page, "floor") >= 2, "the plan's charts are missing");
    ck_assert_msg(strstr(page, "The plan predicts ") && strstr(page, "it fits."), "no plan sentence");
    rc_check_self_contained(page);
    free(page);
}
END_TEST

START_TEST(bad_input) {
    char path[1200], html[1200];
    snprintf(path, sizeof path, "%s/junk.jsonl", tmp);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs("hello\n{\"event\":\"other\"}\n", f) >= 0 && fclose(f) == 0);
    snprintf(html, sizeof html, "%s/out.html", tmp);
    char *argv[] = {(char *)tu_binary(), "report", path, "-o", html, NULL};
    char *out = NULL, *err = NULL;
    int rc = tu_run(argv, NULL, &out, &err);
    char want[2600];
    snprintf(want, sizeof want, "tiertrain: report %s: 2 lines, none a step, summary or plan (give a --log file of "
             "tiertrain train, or the JSON line of tiertrain plan)\n", path);
    ck_assert_int_eq(rc, 2);
    ck_assert_str_eq(err, want);
    ck_assert_msg(access(html, F_OK) != 0, "a refused report left %s", html);
    free(out);
    free(err);
    char *argv2[] = {(char *)tu_binary(), "report", path, NULL};
    rc = tu_run(argv2, NULL, &out, &err);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(err, "missing -o report.html"), "%s", err);
    free(out);
    free(err);

    // a --trace that is not one: the line names the flag, whatever is wrong with the file
    char log[1200], trace[1200];
    snprintf(log, sizeof log, "%s/plan.json", tmp);
    char *plan[] = {(char *)tu_binary(), "plan", "--model", "tiny", "--device", "cpu", "--log", log, NULL};
    ck_assert_msg(tu_run(plan, NULL, &out, &err) == 0, "%s", err);
    free(out);
    free(err);
    static const char *const texts[] = {"", "{\"a\":1}\n{\"b\":2}\n", "{\"traceEvents\":3}"};
    static const char *const says[] = {"empty or unreadable", "byte 8: unexpected data after the document ('{')",
                                       "no traceEvents array"};
    for (int i = 0; i < 3; i++) {
        snprintf(trace, sizeof trace, "%s/trace%d.json", tmp, i);
        f = fopen(trace, "w");
        ck_assert(f && fputs(texts[i], f) >= 0 && fclose(f) == 0);
        char *argv3[] = {(char *)tu_binary(), "report", log, "--trace", trace, "-o", html, NULL};
        rc = tu_run(argv3, NULL, &out, &err);
        snprintf(want, sizeof want, "tiertrain: --trace %s: %s (not a tiertrain --trace file)\n", trace, says[i]);
        ck_assert_int_eq(rc, 2);
        ck_assert_str_eq(err, want);
        ck_assert_msg(access(html, F_OK) != 0, "a refused report left %s", html);
        free(out);
        free(err);
    }
}
END_TEST

// text with every value of "key": (a number or a string, up to the next ',' or '}') replaced
// by value, as written (malloc'd); *n counts the replacements.
static char *set_field(const char *text, const char *key, const char *value, int *n) {
    char k[128];
    snprintf(k, sizeof k, "\"%s\":", key);
    size_t cap = strlen(text) * 2 + 4096, used = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    *n = 0;
    for (const char *p = text, *hit; *p; p = hit) {
        hit = strstr(p, k);
        size_t keep = hit ? (size_t)(hit - p) + strlen(k) : strlen(p);
        ck_assert(used + keep + strlen(value) + 1 < cap);
        memcpy(out + used, p, keep);
        used += keep;
        if (!hit) break;
        used += (size_t)sprintf(out + used, "%s", value);
        hit += strlen(k);
        hit += *hit == '"' ? strcspn(hit + 1, "\"") + 2 : strcspn(hit, ",}");
        (*n)++;
    }
    out[used] = 0;
    return out;
}

// rc_make_run's log with key set to value everywhere it appears (*n times): dir/name.
static void edited_log(const char *name, const char *key, const char *value, int *n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/run.jsonl", tmp);
    char *log = tu_slurp(path);
    ck_assert_ptr_nonnull(log);
    char *out = set_field(log, key, value, n);
    free(log);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(out, f) >= 0 && fclose(f) == 0);
    free(out);
}

// Every string the page takes from the log is escaped: the summary's params_hash, the plan's
// homes and the names of its memory parts (the keys of device_parts).
START_TEST(markup_escaped) {
    char html[1200], path[1200];
    int n;
    rc_make_run(tmp);
    edited_log("a.jsonl", "params_hash", "\"</svg><script>x</script>\"", &n);
    ck_assert_int_eq(n, 1); // the summary's (no checkpoint events in this run)
    snprintf(path, sizeof path, "%s/a.jsonl", tmp);
    char *log = tu_slurp(path);
    ck_assert_ptr_nonnull(log);
    char *b = set_field(log, "params_home", "\"<i>host</i>\"", &n);
    ck_assert_int_eq(n, 1);
    free(log);
    char *c = strstr(b, "\"device_parts\":{\"");
    ck_assert_msg(c != NULL, "no device_parts in the plan line");
    c += strlen("\"device_parts\":{\"");
    size_t len = strcspn(c, "\"");
    ck_assert(len >= 3);
    memcpy(c, "<b>", 3); // the first part's name, markup
    snprintf(path, sizeof path, "%s/b.jsonl", tmp);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(b, f) >= 0 && fclose(f) == 0);
    free(b);
    char *page = rc_report(tmp, "b.jsonl", 0, html, sizeof html);
    ck_assert_msg(strstr(page, ", params_hash &lt;/svg&gt;&lt;script&gt;x&lt;/script&gt;."), "params_hash not escaped");
    ck_assert_msg(strstr(page, "; params &lt;i&gt;host&lt;/i&gt;, grads "), "params_home not escaped");
    ck_assert_msg(strstr(page, "data-name=\"&lt;b&gt;"), "a part's name not escaped in data-name");
    ck_assert_msg(strstr(page, "<title>&lt;b&gt;"), "a part's name not escaped in its title");
    ck_assert_msg(!strstr(page, "<b>\"") && !strstr(page, "<i>") && !strstr(page, "</svg><script"),
                  "markup from the log reached the page");
    rc_check_self_contained(page); // no "<script" anywhere
    rc_check_charts(page, RC_STEPS, RC_EVALS, 1, 0);
    free(page);
}
END_TEST

// Every <svg>…</svg> of the page is free of "nan" and "inf" in any case.
static void ck_svg_finite(const char *page) {
    for (const char *p = strstr(page, "<svg"); p; p = strstr(p, "<svg")) {
        const char *end = strstr(p, "</svg>");
        ck_assert_msg(end != NULL, "an <svg> without its end");
        for (const char *q = p; q < end; q++) {
            char w[4] = {(char)tolower((unsigned char)q[0]), q[0] ? (char)tolower((unsigned char)q[1]) : 0,
                         q[0] && q[1] ? (char)tolower((unsigned char)q[2]) : 0, 0};
            ck_assert_msg(strcmp(w, "nan") && strcmp(w, "inf"), "the SVG holds \"%.60s\"", q > p + 20 ? q - 20 : p);
        }
        p = end;
    }
}

// Numbers no run logs (step_ms 1e308: the span of the axis overflowed to inf and every
// coordinate to NaN) are left out of the charts and counted on the page; the rest is drawn.
START_TEST(absurd_values) {
    char html[1200];
    int n;
    rc_make_run(tmp);
    edited_log("huge.jsonl", "step_ms", "1e308", &n);
    ck_assert_int_eq(n, RC_STEPS + 1); // each step's and the summary's
    char *page = rc_report(tmp, "huge.jsonl", 0, html, sizeof html);
    ck_svg_finite(page);
    ck_assert_int_eq(rc_chart_points(page, "step-time"), 0);
    ck_assert_int_eq(rc_series_points(page, "training loss"), RC_STEPS);
    ck_assert_msg(strstr(page, " 12 values beyond 1e+18 (a corrupt log?) not drawn."), "the left-out values unsaid");
    free(page);
    edited_log("steps.jsonl", "step", "1e308", &n); // the x axis: every step and evaluation
    ck_assert_int_eq(n, RC_STEPS + RC_EVALS);
    page = rc_report(tmp, "steps.jsonl", 0, html, sizeof html);
    ck_svg_finite(page);
    ck_assert_int_eq(rc_chart_points(page, "loss"), 0);
    free(page);
}
END_TEST

// --trace on a disk with no room: trace_open fails with the write's error and leaves no empty
// file behind (a file size limit of 0 bytes stands in for the full disk, in a child).
START_TEST(trace_open_full) {
    char path[1100];
    snprintf(path, sizeof path, "%s/t.json", tmp);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim;
        if (getrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
        lim.rlim_cur = 0;
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
        _exit(trace_open(path, 16) == -EFBIG ? 0 : 4);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "trace_open: status %#x (want -EFBIG)", status);
    struct stat st;
    ck_assert_msg(stat(path, &st) != 0 && errno == ENOENT, "%s was left behind", path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("report");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, complete_run);
    tcase_add_test(tc, partial_log);
    tcase_add_test(tc, short_run_axis);
    tcase_add_test(tc, plan_line);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, markup_escaped);
    tcase_add_test(tc, absurd_values);
    tcase_add_test(tc, trace_open_full);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
