// test_report_browser.c — the report of a real run, rendered by a real browser: headless
// Chromium (Debian's `chromium`; `scripts/deps.sh --browser` installs it, best effort) takes
// a screenshot, which must not be blank (tests/png_stats.py decodes it), and dumps the DOM
// it built, in which every chart's <svg> must be present with as many values as the run
// logged. Skips (exit 77) where there is no chromium.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "report_check.h"
#include "testutil.h"

static const char *chromium(void) {
    static const char *const names[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser", NULL};
    for (int i = 0; names[i]; i++)
        if (access(names[i], X_OK) == 0) return names[i];
    return NULL;
}

START_TEST(renders) {
    char *dir = tu_tmpdir("browser"), html[1200], png[1300], url[1300], shot[1400], prof[1300];
    rc_make_run(dir);
    free(rc_report(dir, "run.jsonl", 1, html, sizeof html));
    snprintf(png, sizeof png, "%s/report.png", dir);
    snprintf(url, sizeof url, "file://%s", html);
    snprintf(shot, sizeof shot, "--screenshot=%s", png);
    snprintf(prof, sizeof prof, "--user-data-dir=%s/profile", dir); // nothing of $HOME's
    char *out = NULL, *err = NULL;
    char *shot_argv[] = {"/usr/bin/timeout", "120", (char *)chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                         "--hide-scrollbars", prof, "--window-size=900,2400", shot, url, NULL};
    int rc = tu_run(shot_argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "chromium --screenshot exit %d:\n%s", rc, err);
    free(out);
    free(err);
    char *stats_argv[] = {"/usr/bin/python3", TT_TESTS_DIR "/png_stats.py", png, NULL};
    rc = tu_run(stats_argv, NULL, &out, &err);
    int w = 0, h = 0, colours = 0;
    double inked = 0;
    ck_assert_msg(rc == 0 && sscanf(out, "%d %d %d %lf", &w, &h, &colours, &inked) == 4, "png_stats: %s%s", out, err);
    fprintf(stderr, "renders: %dx%d screenshot, %d colours, %.1f%% inked\n", w, h, colours, 100 * inked);
    ck_assert_msg(w == 900 && h == 2400, "screenshot %dx%d", w, h);
    ck_assert_msg(colours >= 8 && inked > 0.02, "a blank page: %d colours, %.2f%% inked", colours, 100 * inked);
    free(out);
    free(err);
    char *dom_argv[] = {"/usr/bin/timeout", "120", (char *)chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        prof, "--dump-dom", url, NULL};
    rc = tu_run(dom_argv, NULL, &out, &err);
    ck_assert_msg(rc == 0 && strstr(out, "</html>"), "chromium --dump-dom exit %d:\n%s", rc, err);
    rc_check_charts(out, RC_STEPS, RC_EVALS, 1, 1); // as the browser parsed them
    free(out);
    free(err);
    tu_rm_rf(dir);
    free(dir);
}
END_TEST

int main(void) {
    if (!chromium()) {
        fprintf(stderr, "test_report_browser: no chromium (scripts/deps.sh --browser installs it): skipped\n");
        return 77;
    }
    Suite *s = suite_create("report_browser");
    TCase *tc = tcase_create("browser");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, renders);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
