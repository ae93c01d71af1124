// report_check.h — what test_report.c and test_report_browser.c share: a small run to
// report on, the report command, and the checks of a page's charts (by the ids and the
// data-points/points attributes report_html.c gives every chart). Static inline: each suite
// is its own program and uses some of them.
#pragma once
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

enum { RC_STEPS = 12, RC_EVALS = 3 }; // the run below: 12 steps, an evaluation every 4

// tiny for 12 steps, optimizer on NVMe (so every link moves bytes): dir/run.jsonl and
// dir/run.trace.json. No calibration profile: XDG_CACHE_HOME is an empty folder.
static inline void rc_make_run(const char *dir) {
    char cache[1200];
    snprintf(cache, sizeof cache, "XDG_CACHE_HOME=%s/no-cache", dir);
    char *env[] = {cache, NULL};
    char log[1200], trace[1200];
    snprintf(log, sizeof log, "%s/run.jsonl", dir);
    snprintf(trace, sizeof trace, "%s/run.trace.json", dir);
    char *argv[] = {(char *)tu_binary(), "train", "--model", "tiny", "--steps", "12", "--eval-every", "4",
                    "--eval-batches", "1", "--device", "cpu", "--threads", "1", "--params", "host", "--optimizer",
                    "nvme", "--nvme-path", (char *)dir, "--log", log, "--trace", trace, "--quiet", NULL};
    char *out = NULL, *err = NULL;
    int rc = tu_run(argv, env, &out, &err);
    ck_assert_msg(rc == 0, "train exit %d:\n%s", rc, err);
    free(out);
    free(err);
}

// `tiertrain report dir/LOG [--trace dir/run.trace.json] -o dir/LOG.html`: the page's text
// (malloc'd), its path in html.
static inline char *rc_report(const char *dir, const char *log, int with_trace, char *html, size_t len) {
    char in[1200], trace[1200];
    snprintf(in, sizeof in, "%s/%s", dir, log);
    snprintf(trace, sizeof trace, "%s/run.trace.json", dir);
    snprintf(html, len, "%s/%s.html", dir, log);
    char *argv[] = {(char *)tu_binary(), "report", in, "-o", html, with_trace ? "--trace" : NULL, trace, NULL};
    char *out = NULL, *err = NULL;
    int rc = tu_run(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "report exit %d:\n%s", rc, err);
    ck_assert_msg(strstr(out, "report: ") && strstr(out, html), "%s", out);
    free(out);
    free(err);
    char *page = tu_slurp(html);
    ck_assert_ptr_nonnull(page);
    return page;
}

// data-points of <svg id="ID">, or -1 when there is no such chart.
static inline int rc_chart_points(const char *page, const char *id) {
    char key[128];
    snprintf(key, sizeof key, "<svg id=\"%s\" data-points=\"", id);
    const char *p = strstr(page, key);
    return p ? atoi(p + strlen(key)) : -1;
}

// The x,y pairs in the points of the polyline of series NAME (-1: none), checked against its
// own data-points.
static inline int rc_series_points(const char *page, const char *name) {
    char key[160];
    snprintf(key, sizeof key, "data-series=\"%s\" data-points=\"", name);
    const char *p = strstr(page, key);
    if (!p) return -1;
    int said = atoi(p + strlen(key));
    const char *pts = strstr(p, "points=\"");
    pts = pts ? strstr(pts + 8, "points=\"") : NULL; // the attribute after data-points
    ck_assert_msg(pts != NULL, "series %s has no points", name);
    pts += 8;
    int n = 0;
    for (const char *q = pts; *q && *q != '"'; q++)
        if (*q == ',') n++;
    ck_assert_msg(n == said, "series %s: %d pairs, data-points %d", name, n, said);
    return n;
}

// Every chart of a complete run's page, with as many values as the run logged.
static inline void rc_check_charts(const char *page, int steps, int evals, int with_plan, int with_trace) {
    ck_assert_int_eq(rc_chart_points(page, "loss"), steps + evals);
    ck_assert_int_eq(rc_series_points(page, "training loss"), steps);
    ck_assert_int_eq(rc_series_points(page, "validation loss"), evals);
    ck_assert_int_eq(rc_chart_points(page, "step-time"), steps);
    ck_assert_int_eq(rc_series_points(page, "step time"), steps);
    ck_assert_int_ge(rc_chart_points(page, "time-split"), 1);
    if (with_plan) {
        ck_assert_int_ge(rc_chart_points(page, "floor"), 2);
        ck_assert_int_ge(rc_chart_points(page, "memory"), 4);
    }
    if (with_trace) ck_assert_int_ge(rc_chart_points(page, "trace"), 3);
}

// Nothing fetched: no script, no external reference of any kind.
static inline void rc_check_self_contained(const char *page) {
    static const char *const banned[] = {"<script", "http://", "https://", " src=", "@import", "url(", "<link", NULL};
    for (int i = 0; banned[i]; i++) ck_assert_msg(!strstr(page, banned[i]), "the page holds \"%s\"", banned[i]);
}
