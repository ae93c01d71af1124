// report_html.c — `tiertrain report RUN.jsonl [--trace T.json] -o report.html` (report.h):
// one self-contained page (inline SVG and CSS; no script, font or image is fetched) from a
// run's --log, a crashed run's partial one, or the JSON line of `tiertrain plan`.
//   loss      the training loss per step and the validation loss per evaluation (#loss)
//   time      each step's time against the plan's floor (#step-time)
//   split     where the mean step went: compute, waiting for parameters, copies (#time-split)
//   floor     the plan's time per resource over the step (the floor sums its two phases' largest) (#floor)
//   memory    the plan's device and host parts (#memory)
//   trace     with --trace, each track's busy time (#trace)
// plus the tier table and one sentence naming what binds the run. Every chart's <svg> has an
// id and data-points (how many values it draws), so a test can count them in the DOM.
// The log is input like any other: every string from it goes through html_text, and a number
// beyond VALUE_MAX is not drawn (and counted on the page), so no coordinate is NaN or inf.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "json.h"
#include "plan.h"
#include "report.h"
#include "util.h"

typedef struct {
    double *x, *y;
    int n, cap;
} series_t;

typedef struct {
    series_t loss, val, step_ms;
    json_t *plan, *summary;       // the last of each, or NULL
    int lines, bad_lines, ckpts, last_step;
    int absurd;                   // step and eval values beyond VALUE_MAX: not drawn
    double track_ms[8];           // --trace: busy time per track
    int has_trace;
} run_log_t;

static void push(series_t *s, double x, double y) {
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 256;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx), *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!nx || !ny) { free(nx ? nx : s->x); free(ny ? ny : s->y); runtime_error("report: out of memory"); }
        s->x = nx;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

static double num(const json_t *o, const char *key, double dflt) {
    const json_t *v = json_get(o, key);
    double d;
    char e[8];
    return v && v->type == JSON_NUMBER && json_as_double(v, key, &d, e, sizeof e) == 0 ? d : dflt;
}

static const char *str(const json_t *o, const char *key, const char *dflt) {
    const json_t *v = json_get(o, key);
    return v && v->type == JSON_STRING ? v->s : dflt;
}

// The largest magnitude a chart draws: 1e18 ms is 30 million years, 1e18 bytes an exabyte, so
// no run logs more; anything larger is a corrupt or hand-made log. Skipping such a value (and
// saying so) beats the alternatives: clamping would draw a made-up number, refusing the log
// would lose the rest of a crashed run's page, and drawing it would squash every other point
// onto the axis, while the span of two values near DBL_MAX overflows to inf and the points to
// NaN. Bounded so, a span, a sum of a few and a (uint64_t) cast are all finite and defined.
#define VALUE_MAX 1e18

static double drawable(double v) { return fabs(v) <= VALUE_MAX ? v : NAN; } // NaN stays NaN

// num() for a value to be drawn: NAN, counted in lg->absurd, beyond VALUE_MAX.
static double num_drawn(run_log_t *lg, const json_t *o, const char *key, double dflt) {
    double v = num(o, key, dflt);
    if (isfinite(v) && isnan(drawable(v))) lg->absurd++;
    return drawable(v);
}

// One line of the log into lg (a line that is not a JSON object counts as bad: a crash can
// cut the last one short).
static void take_line(run_log_t *lg, const char *line, size_t n, const char *path) {
    json_t *o = NULL;
    char e[256];
    lg->lines++;
    if (json_parse(line, n, path, NULL, &o, e, sizeof e) != 0 || o->type != JSON_OBJECT) {
        lg->bad_lines++;
        json_free(o);
        return;
    }
    const char *ev = str(o, "event", NULL);
    if (!ev && json_get(o, "plan")) {
        json_free(lg->plan);
        lg->plan = o;
        return;
    }
    if (ev && !strcmp(ev, "summary")) {
        json_free(lg->summary);
        lg->summary = o;
        return;
    }
    if (ev && !strcmp(ev, "step")) {
        double st = num_drawn(lg, o, "step", 0); // an absurd step leaves its points out (a NaN y is not drawn)
        push(&lg->loss, st, isnan(st) ? NAN : num_drawn(lg, o, "loss", NAN));
        push(&lg->step_ms, st, isnan(st) ? NAN : num_drawn(lg, o, "step_ms", NAN));
        if (st >= 0 && st <= INT_MAX) lg->last_step = (int)st;
    } else if (ev && !strcmp(ev, "eval")) {
        double st = num_drawn(lg, o, "step", 0);
        push(&lg->val, st, isnan(st) ? NAN : num_drawn(lg, o, "val_loss", NAN));
    } else if (ev && !strcmp(ev, "checkpoint")) {
        lg->ckpts++;
    }
    json_free(o);
}

static int read_log(run_log_t *lg, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (n > 0) take_line(lg, line, (size_t)n, path);
    }
    free(line);
    int bad = ferror(f);
    fclose(f);
    return bad ? -EIO : 0;
}

// --trace: the busy time of each track (the complete "X" events' durations, by tid).
static int read_trace(run_log_t *lg, const char *path, char *err, size_t errlen) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "--trace %.900s: %s", path, strerror(e));
        return -e;
    }
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)len + 1)))
            n = fread(text, 1, (size_t)len, f);
    }
    fclose(f);
    json_t *root = NULL;
    json_limits_t lim = {.max_depth = 16, .max_bytes = (size_t)1 << 31, .max_values = 0};
    char doc[1000], msg[1400] = "";
    snprintf(doc, sizeof doc, "--trace %.900s", path); // json.h's messages start with it
    int rc = 0;
    if (!text || n == 0) {
        snprintf(msg, sizeof msg, "%s: empty or unreadable", doc);
        rc = -EINVAL;
    } else if (json_parse(text, n, doc, &lim, &root, msg, sizeof msg) != 0) {
        rc = -EINVAL;
    }
    if (rc) snprintf(err, errlen, "%s (not a tiertrain --trace file)", msg);
    free(text);
    const json_t *ev = rc == 0 ? json_get(root, "traceEvents") : NULL;
    if (rc == 0 && (!ev || ev->type != JSON_ARRAY)) {
        snprintf(err, errlen, "--trace %.900s: no traceEvents array (not a tiertrain --trace file)", path);
        rc = -EINVAL;
    }
    for (size_t i = 0; rc == 0 && i < ev->n; i++) {
        const json_t *e = &ev->kids[i];
        const char *ph = str(e, "ph", "");
        int tid = (int)num(e, "tid", -1);
        if (!strcmp(ph, "X") && tid >= 0 && tid < 8) lg->track_ms[tid] += num(e, "dur", 0) / 1e3;
    }
    json_free(root);
    lg->has_trace = rc == 0;
    return rc;
}

// ---------------------------------------------------------------- drawing

// Text from the log, safe between tags and inside a double-quoted attribute.
static void html_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

enum { W = 760, H = 260, ML = 64, MR = 16, MT = 16, MB = 40 };

static void fmt_num(char *b, size_t n, double v) {
    if (fabs(v) >= 1000 || v == 0) snprintf(b, n, "%.0f", v);
    else if (fabs(v) >= 10) snprintf(b, n, "%.1f", v);
    else snprintf(b, n, "%.3g", v);
}

typedef struct {
    const series_t *s;
    const char *name, *color;
    int dots;            // markers at each point (a sparse series such as the validation loss)
} line_t;

// A line chart of up to 3 series on shared axes; an optional horizontal reference at ref.
static void line_chart(FILE *f, const char *id, const char *title, const char *yname, const line_t *ls, int nl,
                       double ref, const char *ref_name) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    int points = 0;
    for (int k = 0; k < nl; k++)
        for (int i = 0; i < ls[k].s->n; i++) {
            if (!isfinite(ls[k].s->y[i])) continue;
            x0 = fmin(x0, ls[k].s->x[i]); x1 = fmax(x1, ls[k].s->x[i]);
            y0 = fmin(y0, ls[k].s->y[i]); y1 = fmax(y1, ls[k].s->y[i]);
            points++;
        }
    ref = drawable(ref);
    if (isfinite(ref) && ref > 0) { y0 = fmin(y0, ref); y1 = fmax(y1, ref); }
    fprintf(f, "<h2>%s</h2>\n<svg id=\"%s\" data-points=\"%d\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "role=\"img\" aria-label=\"%s\">\n", title, id, points, W, H, W, H, title);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"plot\"/>\n", ML, MT, W - ML - MR, H - MT - MB);
    if (points == 0) {
        fprintf(f, "<text x=\"%d\" y=\"%d\">no data in the log</text>\n</svg>\n", ML + 10, MT + 30);
        return;
    }
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) { y1 = y0 + fabs(y0) * 0.05 + 1e-9; y0 -= fabs(y0) * 0.05; }
    const double pw = W - ML - MR, ph = H - MT - MB;
#define PX(v) (ML + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (MT + (1 - ((v) - y0) / (y1 - y0)) * ph)
    char a[32];
    for (int t = 0; t <= 4; t++) { // y ticks and grid
        double v = y0 + (y1 - y0) * t / 4;
        fmt_num(a, sizeof a, v);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%d\" y=\"%.1f\" "
                   "class=\"tick\" text-anchor=\"end\">%s</text>\n", ML, W - MR, PY(v), PY(v), ML - 6, PY(v) + 4, a);
    }
    // x ticks on whole steps, each once: a span under 4 steps takes every step, not quarters
    double last = -1;
    for (int t = 0; t <= 4; t++) {
        const double v = round(x1 - x0 < 4 ? x0 + t : x0 + (x1 - x0) * t / 4);
        if (v > x1 + 1e-9 || v == last) continue;
        last = v;
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%.0f</text>\n", PX(v), H - MB + 16,
                v);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"axis\" text-anchor=\"middle\">step</text>\n", ML + (int)pw / 2, H - 6);
    fprintf(f, "<text x=\"14\" y=\"%d\" class=\"axis\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">%s</text>\n",
            MT + (int)ph / 2, MT + (int)ph / 2, yname);
    if (isfinite(ref) && ref > 0)
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"ref\"/><text x=\"%d\" y=\"%.1f\" "
                   "class=\"tick\" text-anchor=\"end\">%s</text>\n", ML, W - MR, PY(ref), PY(ref), W - MR - 4, PY(ref) - 4,
                ref_name);
    for (int k = 0; k < nl; k++) {
        const series_t *s = ls[k].s;
        int n = 0;
        for (int i = 0; i < s->n; i++) n += isfinite(s->y[i]);
        if (!n) continue;
        fprintf(f, "<polyline class=\"series\" data-series=\"%s\" data-points=\"%d\" stroke=\"%s\" points=\"", ls[k].name,
                n, ls[k].color);
        for (int i = 0; i < s->n; i++)
            if (isfinite(s->y[i])) fprintf(f, "%.1f,%.1f ", PX(s->x[i]), PY(s->y[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; ls[k].dots && i < s->n; i++)
            if (isfinite(s->y[i]))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(s->x[i]), PY(s->y[i]),
                        ls[k].color);
    }
    for (int k = 0; k < nl; k++) // legend
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                   "class=\"tick\">%s</text>\n", ML + 12 + k * 150, MT + 10, ls[k].color, ML + 28 + k * 150, MT + 15,
                ls[k].name);
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
}

typedef struct {
    const char *name;
    double v;
} seg_t;

static const char *const palette[] = {"#3b6ea5", "#e07b39", "#5aa469", "#c44e52", "#8172b2", "#937860", "#da8bc3",
                                      "#8c8c8c"};

// One horizontal stacked bar of the segments (values in unit), with a legend of each.
static void stacked_bar(FILE *f, const char *id, const char *title, const seg_t *sg, int n, const char *unit,
                        int bytes) {
    double total = 0;
    int shown = 0;
    for (int i = 0; i < n; i++)
        if (drawable(sg[i].v) > 0) { total += sg[i].v; shown++; }
    const int rows = (shown + 2) / 3, h = 70 + rows * 20;
    fprintf(f, "<h2>%s</h2>\n<svg id=\"%s\" data-points=\"%d\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "role=\"img\" aria-label=\"%s\">\n", title, id, shown, W, h, W, h, title);
    double x = ML;
    int k = 0;
    char a[32];
    for (int i = 0; i < n; i++) {
        if (!(drawable(sg[i].v) > 0)) continue;
        double w = total > 0 ? sg[i].v / total * (W - ML - MR) : 0;
        const char *c = palette[k % 8];
        fprintf(f, "<rect class=\"segment\" data-name=\"");
        html_text(f, sg[i].name); // a plan's part names are the log's keys
        fprintf(f, "\" x=\"%.1f\" y=\"10\" width=\"%.1f\" height=\"30\" fill=\"%s\"><title>", x, w, c);
        html_text(f, sg[i].name);
        fprintf(f, "</title></rect>\n");
        if (bytes) format_bytes(a, sizeof a, (uint64_t)sg[i].v);
        else snprintf(a, sizeof a, "%.1f %s", sg[i].v, unit);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                   "class=\"tick\">", ML + (k % 3) * 230, 56 + (k / 3) * 20, c, ML + (k % 3) * 230 + 16,
                66 + (k / 3) * 20);
        html_text(f, sg[i].name);
        fprintf(f, ": %s (%.0f%%)</text>\n", a, total > 0 ? 100 * sg[i].v / total : 0);
        x += w;
        k++;
    }
    if (!shown) fprintf(f, "<text x=\"%d\" y=\"30\">nothing to show</text>\n", ML);
    fprintf(f, "</svg>\n");
}

// ---------------------------------------------------------------- the page

// The sentence that names what binds the run (or the plan).
static void binding(FILE *f, const run_log_t *lg) {
    const json_t *s = lg->summary, *p = lg->plan;
    fprintf(f, "<p id=\"bound\" class=\"bound\">");
    if (s) {
        const double step = num(s, "step_ms", 0), floor_ms = num(s, "floor_ms", 0), fw = num(s, "fetch_wait_ms", 0),
                     steps = fmax(1, num(s, "steps", 1));
        fprintf(f, "This run is bound by <b>");
        html_text(f, str(s, "bound", "?"));
        fprintf(f, "</b>: a step took %.1f ms against a predicted floor of %.1f ms (efficiency %.2f)", step, floor_ms,
                num(s, "efficiency", 0));
        if (fw / steps > 0.05 * step) fprintf(f, "; compute waited %.1f ms per step for parameters", fw / steps);
        fprintf(f, ".");
        if (p && !strcmp(str(p, "rates", ""), "defaults"))
            fprintf(f, " The floor comes from built-in rates, not this machine's: run <code>tiertrain bench "
                       "calibrate</code> for one that means something.");
    } else if (p && lg->loss.n == 0) {
        fprintf(f, "The plan predicts %.1f ms per step, bound by <b>", num(p, "floor_ms", 0));
        html_text(f, str(p, "bound", "?"));
        fprintf(f, "</b>; it %s.", json_get(p, "feasible") && json_get(p, "feasible")->type == JSON_TRUE
                                      ? "fits" : "does not fit");
    } else {
        fprintf(f, "The log ends after step %d without its summary: the run crashed or was killed", lg->last_step);
        if (p) {
            fprintf(f, " (the plan predicted %.1f ms per step, bound by ", num(p, "floor_ms", 0));
            html_text(f, str(p, "bound", "?"));
            fprintf(f, ")");
        }
        fprintf(f, ".");
    }
    fprintf(f, "</p>\n");
}

static void tier_table(FILE *f, const run_log_t *lg) {
    const json_t *s = lg->summary, *p = lg->plan;
    if (!s && !p) return;
    char a[32], b[32], c[32];
    fprintf(f, "<h2>Tiers</h2>\n<table id=\"tiers\">\n<tr><th>tier</th><th>peak (run)</th><th>planned</th>"
               "<th>budget</th></tr>\n");
    const struct { const char *name, *peak, *plan, *budget; } rows[] = {
        {"device", "peak_device_bytes", "device_bytes", "hbm_budget"},
        {"host", "peak_host_bytes", "host_bytes", "host_budget"},
        {"nvme", NULL, "nvme_bytes", "nvme_free"},
    };
    for (int i = 0; i < 3; i++) {
        // drawable: a byte count beyond VALUE_MAX (NaN: shown as none) would overflow the (uint64_t) cast
        double peak = drawable(s && rows[i].peak ? num(s, rows[i].peak, -1) : -1),
               pl = drawable(p ? num(p, rows[i].plan, -1) : -1), bud = drawable(p ? num(p, rows[i].budget, 0) : 0);
        fprintf(f, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s%s</td></tr>\n", rows[i].name,
                peak >= 0 ? format_bytes(a, sizeof a, (uint64_t)peak) : "–",
                pl >= 0 ? format_bytes(b, sizeof b, (uint64_t)pl) : "–",
                bud > 0 ? format_bytes(c, sizeof c, (uint64_t)bud) : "none", i == 2 && bud > 0 ? " free" : "");
    }
    fprintf(f, "</table>\n");
    if (!s) return;
    const double steps = fmax(1, num(s, "steps", 1));
    fprintf(f, "<table id=\"links\">\n<tr><th>link</th><th>moved in the run</th><th>per step</th></tr>\n");
    const struct { const char *name, *key; } links[] = {
        {"host → device", "h2d_bytes"}, {"device → host", "d2h_bytes"},
        {"NVMe read", "nvme_bytes_read"}, {"NVMe write", "nvme_bytes_written"},
    };
    for (int i = 0; i < 4; i++) {
        double v = drawable(num(s, links[i].key, 0));
        fprintf(f, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", links[i].name,
                v >= 0 ? format_bytes(a, sizeof a, (uint64_t)v) : "–",
                v >= 0 ? format_bytes(b, sizeof b, (uint64_t)(v / steps)) : "–");
    }
    fprintf(f, "</table>\n<table id=\"waits\">\n<tr><th>wait</th><th>in the run</th><th>per step</th></tr>\n");
    const struct { const char *name, *key; } waits[] = {
        {"compute waiting for parameters", "fetch_wait_ms"}, {"optimizer waiting for NVMe", "optimizer_nvme_wait_ms"},
        {"compute copying gradients and checkpoints", "copy_ms"}, {"AdamW updates (overlapped)", "optimizer_ms"},
    };
    for (int i = 0; i < 4; i++)
        fprintf(f, "<tr><td>%s</td><td>%.1f ms</td><td>%.2f ms</td></tr>\n", waits[i].name, num(s, waits[i].key, 0),
                num(s, waits[i].key, 0) / steps);
    fprintf(f, "</table>\n");
}

// The parts of one tier from the plan's "<tier>_parts" object.
static void memory_bar(FILE *f, const json_t *p, const char *key, const char *id, const char *title) {
    const json_t *parts = json_get(p, key);
    seg_t sg[16];
    int n = 0;
    for (size_t i = 0; parts && parts->type == JSON_OBJECT && i < parts->n && n < 16; i++)
        sg[n++] = (seg_t){parts->kids[i].key, num(parts, parts->kids[i].key, 0)};
    stacked_bar(f, id, title, sg, n, "", 1);
}

static void page(FILE *f, const run_log_t *lg, const char *log_path) {
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tiertrain report</title>\n"
               "<style>body{font-family:sans-serif;margin:24px;max-width:800px;color:#222}h1{font-size:22px}"
               "h2{font-size:16px;margin-top:28px}.plot{fill:#fafafa;stroke:#ccc}.grid{stroke:#e4e4e4}"
               ".series{fill:none;stroke-width:1.6}.ref{stroke:#c44e52;stroke-dasharray:5 4}.tick{font-size:11px;"
               "fill:#555}.axis{font-size:12px;fill:#333}table{border-collapse:collapse;margin:8px 0}td,th{border:1px "
               "solid #ccc;padding:3px 10px;text-align:right;font-size:13px}td:first-child,th:first-child{text-align:"
               "left}.bound{font-size:15px;background:#f3f6fa;padding:10px;border-left:4px solid #3b6ea5}</style>\n"
               "</head><body>\n<h1>tiertrain report: ");
    html_text(f, log_path);
    fprintf(f, "</h1>\n<p>");
    const json_t *p = lg->plan, *s = lg->summary;
    if (p) {
        fprintf(f, "model ");
        html_text(f, str(p, "plan", "?"));
        fprintf(f, ", %.2fM parameters; params ", num(p, "params", 0) / 1e6);
        html_text(f, str(p, "params_home", "?"));
        fprintf(f, ", grads ");
        html_text(f, str(p, "grads_home", "?"));
        fprintf(f, ", optimizer ");
        html_text(f, str(p, "optimizer_home", "?"));
        fprintf(f, ". ");
    }
    if (lg->loss.n)
        fprintf(f, "%d step%s logged%s, %d evaluation%s, %d checkpoint%s. ", lg->loss.n, lg->loss.n == 1 ? "" : "s",
                s ? "" : " (no summary: partial)", lg->val.n, lg->val.n == 1 ? "" : "s", lg->ckpts,
                lg->ckpts == 1 ? "" : "s");
    if (s) {
        fprintf(f, "Loss %.4f → %.4f, params_hash ", num(s, "first_loss", NAN), num(s, "final_loss", NAN));
        html_text(f, str(s, "params_hash", "?"));
        fprintf(f, ".");
    }
    if (lg->bad_lines) fprintf(f, " %d line%s not JSON (cut short?) skipped.", lg->bad_lines, lg->bad_lines > 1 ? "s" : "");
    if (lg->absurd)
        fprintf(f, " %d value%s beyond %.0e (a corrupt log?) not drawn.", lg->absurd, lg->absurd > 1 ? "s" : "",
                VALUE_MAX);
    fprintf(f, "</p>\n");
    binding(f, lg);
    if (lg->loss.n || !p) {
        line_t ll[] = {{&lg->loss, "training loss", "#3b6ea5", 0}, {&lg->val, "validation loss", "#e07b39", 1}};
        line_chart(f, "loss", "Loss", "loss", ll, 2, NAN, NULL);
        line_t tl[] = {{&lg->step_ms, "step time", "#5aa469", 0}};
        double floor_ms = s ? num(s, "floor_ms", NAN) : p ? num(p, "floor_ms", NAN) : NAN;
        line_chart(f, "step-time", "Step time against the floor", "ms", tl, 1, floor_ms, "floor");
    }
    if (s) {
        const double steps = fmax(1, num(s, "steps", 1)), step = num(s, "step_ms", 0);
        const double fw = num(s, "fetch_wait_ms", 0) / steps, cp = num(s, "copy_ms", 0) / steps;
        seg_t sg[] = {{"compute and the rest", fmax(0, step - fw - cp)}, {"waiting for parameters", fw},
                      {"copying gradients and checkpoints", cp}};
        stacked_bar(f, "time-split", "Where the mean step went", sg, 3, "ms", 0);
    }
    if (p) {
        const json_t *t = json_get(p, "t_ms");
        seg_t sg[PLAN_NRES];
        for (int r = 0; r < PLAN_NRES; r++) sg[r] = (seg_t){plan_resource_names[r], t ? num(t, plan_resource_names[r], 0) : 0};
        stacked_bar(f, "floor",
                    "The plan's time per resource for one step (the floor: each of its two phases' largest, summed)",
                    sg, PLAN_NRES, "ms", 0);
        memory_bar(f, p, "device_parts", "memory", "Device memory by part (the plan)");
        memory_bar(f, p, "host_parts", "memory-host", "Host memory by part (the plan)");
    }
    tier_table(f, lg);
    if (lg->has_trace) {
        static const char *tracks[] = {"", "compute", "parameter copies", "nvme reads", "nvme writes", "optimizer"};
        seg_t sg[5];
        for (int t = 1; t <= 5; t++) sg[t - 1] = (seg_t){tracks[t], lg->track_ms[t]};
        stacked_bar(f, "trace", "Busy time per track (--trace)", sg, 5, "ms", 0);
    }
    fprintf(f, "<p class=\"tick\">Written by tiertrain %s from %s. Every chart is inline SVG; nothing is fetched.</p>\n"
               "</body></html>\n", TT_VERSION, s ? "a complete log" : lg->loss.n ? "a partial log" : "a plan");
}

int report_html_run(const config_t *cfg) {
    run_log_t *lg = calloc(1, sizeof *lg);
    if (!lg) runtime_error("report: out of memory");
    int rc = read_log(lg, cfg->tok_in);
    if (rc != 0) usage_error("report %s: %s (give a --log file of tiertrain train, or plan's JSON line)", cfg->tok_in,
                             strerror(-rc));
    if (!lg->plan && !lg->summary && lg->loss.n == 0)
        usage_error("report %s: %d line%s, none a step, summary or plan (give a --log file of tiertrain train, or the "
                    "JSON line of tiertrain plan)", cfg->tok_in, lg->lines, lg->lines == 1 ? "" : "s");
    char err[2048];
    if (cfg->trace_path[0] && read_trace(lg, cfg->trace_path, err, sizeof err) != 0) usage_error("%s", err);
    char tmp[TT_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", cfg->tok_out);
    FILE *f = fopen(tmp, "w");
    if (!f) usage_error("-o %s: %s (give a writable path)", cfg->tok_out, strerror(errno));
    page(f, lg, cfg->tok_in);
    errno = 0;
    if (fflush(f) != 0 || ferror(f) || fclose(f) != 0) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        runtime_error("-o %s: write failed: %s", cfg->tok_out, strerror(e));
    }
    if (rename(tmp, cfg->tok_out) != 0) runtime_error("-o %s: rename: %s", cfg->tok_out, strerror(errno));
    printf("report: %s (%d steps, %d evaluations%s%s) -> %s\n", cfg->tok_in, lg->loss.n, lg->val.n,
           lg->summary ? ", summary" : "", lg->plan ? ", plan" : "", cfg->tok_out);
    free(lg->loss.x); free(lg->loss.y); free(lg->val.x); free(lg->val.y); free(lg->step_ms.x); free(lg->step_ms.y);
    json_free(lg->plan);
    json_free(lg->summary);
    free(lg);
    return 0;
}
