// bench_run.c — runs a few real training steps of a configuration for the benches that
// measure whole steps (overlap, capacity): the trainer exactly as `train` builds it, the
// synthetic corpus, no evaluation. Reports the median step time after the first (warm-up)
// step and what the tiers held and moved.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "data.h"
#include "trainer.h"
#include "util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int bench_run_steps(const config_t *cfg, int steps, bench_run_t *r, char *err, size_t errlen) {
    return bench_run_steps_hooked(cfg, steps, NULL, r, err, errlen);
}

int bench_run_steps_hooked(const config_t *cfg, int steps, const bench_hook_t *hook, bench_run_t *r, char *err,
                           size_t errlen) {
    memset(r, 0, sizeof *r);
    data_t *data = NULL;
    int rc = data_open(&data, cfg, err, errlen);
    if (rc != 0) return rc;
    trainer_t *tr = NULL;
    double t0 = now_ms();
    rc = trainer_init(&tr, cfg, err, errlen);
    r->init_ms = now_ms() - t0;
    if (rc != 0) {
        data_free(data);
        return rc;
    }
    if (hook && hook->on_init) hook->on_init(tr, hook->arg);
    const int N = trainer_rows(tr);
    size_t n = (size_t)N * (size_t)cfg->accum;
    int *inputs = malloc(n * sizeof(int)), *targets = malloc(n * sizeof(int));
    double *ms = malloc((size_t)steps * sizeof(double));
    if (!inputs || !targets || !ms) {
        snprintf(err, errlen, "out of memory for the bench's batches");
        rc = -ENOMEM;
        goto out;
    }
    for (int step = 1; step <= steps && rc == 0; step++) {
        double s0 = now_ms();
        for (int mb = 0; mb < cfg->accum; mb++)
            data_next(data, DATA_TRAIN, inputs + (size_t)mb * N, targets + (size_t)mb * N);
        double loss, norm;
        float lr;
        char e2[512];
        if ((rc = trainer_train_step(tr, step, inputs, targets, &loss, &norm, &lr, e2, sizeof e2)) != 0) {
            snprintf(err, errlen, "step %d: %s", step, e2);
            break;
        }
        ms[step - 1] = now_ms() - s0;
        if (hook && hook->on_step) hook->on_step(tr, step, hook->arg);
        if (step == 1) r->first_loss = loss;
        r->last_loss = loss;
    }
    if (rc == 0) rc = trainer_optimizer_wait(tr, err, errlen);
    if (rc == 0) {
        r->last_ms = ms[steps - 1];
        r->step_ms = steps > 1 ? bench_median(ms + 1, steps - 1) : ms[0];
        rc = trainer_params_hash(tr, &r->hash, err, errlen);
        trainer_info(tr, &r->info);
        r->num_params = trainer_model(tr)->num_params;
    }
out:
    free(inputs);
    free(targets);
    free(ms);
    trainer_free(tr);
    data_free(data);
    return rc;
}

plan_t *bench_plan(config_t *cfg, const model_t *m, const profile_t *rates, char *why, size_t wlen, const char *who) {
    plan_t *p = calloc(1, sizeof *p);
    if (!p) runtime_error("%s: out of memory", who);
    why[0] = 0;
    plan_compute(cfg, m, rates, p);
    if (p->feasible) plan_recompute_auto(cfg, m, rates, p, why, wlen);
    if (!p->feasible) usage_error("%s: %s", who, p->reason);
    return p;
}
