// plan_advice.c — plan_advise (see plan.h): the answer to "it does not fit: what do I
// change?" and "it fits: how far can I go?". Every candidate is a copy of the configuration
// with a few flags changed, judged by plan_compute itself, so an answer is never a change
// that the same plan would refuse.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan.h"
#include "util.h" // uses: format_bytes

typedef struct {
    char change[96];  // the flags, as typed
    config_t cfg;     // the configuration with them
} cand_t;

enum { MAX_CANDS = 160 };

typedef struct {
    cand_t *c;
    int n;
} cands_t;


// Adds cfg with its change, unless the change is empty or already listed.
static void add(cands_t *cs, const config_t *cfg, const char *change) {
    if (!change[0] || cs->n == MAX_CANDS) return;
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->c[i].change, change)) return;
    snprintf(cs->c[cs->n].change, sizeof cs->c[cs->n].change, "%s", change);
    cs->c[cs->n].cfg = *cfg;
    cs->n++;
}

// The flags that take base's homes to pl's ("" when they are the same).
static void placement_change(const config_t *base, const plan_placement_t *pl, char *out, size_t len) {
    int w = 0;
    out[0] = 0;
    if (pl->params != base->params_tier)
        w += snprintf(out + w, len - (size_t)w, "--params %s ", tier_kind_name(pl->params));
    if (pl->grads != base->grads_tier)
        w += snprintf(out + w, len - (size_t)w, "--grads %s ", tier_kind_name(pl->grads));
    if (pl->optim != base->optim_tier)
        w += snprintf(out + w, len - (size_t)w, "--optimizer %s ", tier_kind_name(pl->optim));
    if (w > 0) out[w - 1] = 0;
}

// The single changes: placements, checkpoints, batch, budgets, saves.
static void singles(const config_t *cfg, const plan_t *p, cands_t *cs) {
    char ch[96];
    for (int i = 0; i < PLAN_NPLACEMENTS && !cfg->offload_auto; i++) {
        config_t c = *cfg;
        c.params_tier = plan_placements[i].params;
        c.grads_tier = plan_placements[i].grads;
        c.optim_tier = plan_placements[i].optim;
        placement_change(cfg, &plan_placements[i], ch, sizeof ch);
        add(cs, &c, ch);
    }
    if (cfg->acts_tier == ACTS_DEVICE) {
        config_t c = *cfg;
        c.acts_tier = ACTS_HOST;
        add(cs, &c, "--checkpoints host");
    }
    if (cfg->schedule == SCHEDULE_VERTICAL) { // vertical holds every micro-batch's checkpoints at once
        config_t c = *cfg;
        c.schedule = SCHEDULE_HORIZONTAL;
        c.schedule_auto = 0;
        config_resolve_schedule(&c); // --checkpoints auto then takes the device
        add(cs, &c, "--schedule horizontal");
    }
    // the same tokens per step, in smaller micro-batches (as many more as --accum takes)
    for (int d = 2; cfg->B / d >= 1 && (int64_t)cfg->accum * d <= TT_ACCUM_MAX; d *= 2) {
        config_t c = *cfg;
        c.B = cfg->B / d;
        c.accum = cfg->accum * d;
        config_resolve_schedule(&c); // what the command line with this change resolves to
        snprintf(ch, sizeof ch, "--batch %d --accum %d", c.B, c.accum);
        add(cs, &c, ch);
        if (c.schedule == SCHEDULE_VERTICAL && cfg->schedule_auto) { // and without vertical's held checkpoints
            c.schedule = SCHEDULE_HORIZONTAL;
            c.schedule_auto = 0;
            config_resolve_schedule(&c);
            snprintf(ch, sizeof ch, "--batch %d --accum %d --schedule horizontal", c.B, c.accum);
            add(cs, &c, ch);
        }
    }
    if (cfg->hbm_budget && p->device_bytes > cfg->hbm_budget) {
        config_t c = *cfg;
        c.hbm_budget = ALIGN_UP(p->device_bytes, (uint64_t)1 << 20);
        snprintf(ch, sizeof ch, "--hbm-budget %lluM", (unsigned long long)(c.hbm_budget >> 20));
        add(cs, &c, ch);
    }
    if (cfg->host_budget && p->host_bytes > cfg->host_budget) {
        config_t c = *cfg;
        c.host_budget = ALIGN_UP(p->host_bytes, (uint64_t)1 << 20);
        snprintf(ch, sizeof ch, "--host-budget %lluM", (unsigned long long)(c.host_budget >> 20));
        add(cs, &c, ch);
    }
    if (cfg->save_dir[0] && p->save_need > p->save_free) {
        config_t c = *cfg;
        if (!cfg->save_bf16) {
            c.save_bf16 = 1;
            add(cs, &c, "--save-dtype bf16");
        }
        if (cfg->keep_last != 1) {
            c = *cfg;
            c.keep_last = 1;
            add(cs, &c, "--keep-last 1");
        }
    }
}

typedef struct {
    int i;
    double floor_ms;
    int raises, words;   // raises a budget (the user set it for a reason); flags in the change
} fit_t;

// Cheapest first; floors within 1% of each other count as a tie, which goes to the change
// that leaves the budgets alone, then to the shorter one.
static int by_floor(const void *a, const void *b) {
    const fit_t *x = a, *y = b;
    if (fabs(x->floor_ms - y->floor_ms) > 0.01 * fmax(x->floor_ms, y->floor_ms))
        return x->floor_ms < y->floor_ms ? -1 : 1;
    if (x->raises != y->raises) return x->raises - y->raises;
    if (x->words != y->words) return x->words - y->words;
    return x->i - y->i;
}

// Judges cs[from..) as the run with each change would plan it — with --offload auto, on the
// placement plan_auto then picks (not the one it picked without the change); appends the
// feasible ones to fits.
static void judge(cands_t *cs, int from, const model_t *m, const profile_t *prof, plan_t *q, fit_t *fits,
                  int *nfits) {
    for (int i = from; i < cs->n; i++) {
        config_t c = cs->c[i].cfg;
        char why[1024];
        if (c.offload_auto) {
            if (!plan_auto(&c, m, prof, q, why, sizeof why)) continue;
        } else {
            plan_compute(&c, m, prof, q);
            if (!q->feasible) continue;
        }
        // as the run with this change would: --recompute auto decided on it
        plan_recompute_auto(&c, m, prof, q, why, sizeof why);
        const char *ch = cs->c[i].change;
        int words = 1;
        for (const char *c = ch; *c; c++) words += *c == ' ';
        fits[(*nfits)++] = (fit_t){i, q->floor_ms, strstr(ch, "-budget") != NULL, words};
    }
}

static void advise_misfit(const config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, plan_t *q) {
    cands_t cs = {calloc(MAX_CANDS, sizeof(cand_t)), 0};
    fit_t *fits = calloc(MAX_CANDS, sizeof *fits);
    if (!cs.c || !fits) goto out;
    singles(cfg, p, &cs);
    int nfits = 0, nsingles = cs.n;
    judge(&cs, 0, m, prof, q, fits, &nfits);
    if (nfits < 3) { // two at once: a placement with each other single change
        for (int i = 0; i < nsingles; i++) {
            if (strncmp(cs.c[i].change, "--params", 8) && strncmp(cs.c[i].change, "--grads", 7) &&
                strncmp(cs.c[i].change, "--optimizer", 11))
                continue;
            for (int j = 0; j < nsingles; j++) {
                if (!strncmp(cs.c[j].change, "--params", 8) || !strncmp(cs.c[j].change, "--grads", 7) ||
                    !strncmp(cs.c[j].change, "--optimizer", 11))
                    continue;
                config_t c = cs.c[j].cfg; // the other change, then the placement on top
                c.params_tier = cs.c[i].cfg.params_tier;
                c.grads_tier = cs.c[i].cfg.grads_tier;
                c.optim_tier = cs.c[i].cfg.optim_tier;
                char ch[sizeof cs.c[0].change];
                if (snprintf(ch, sizeof ch, "%s %s", cs.c[i].change, cs.c[j].change) < (int)sizeof ch)
                    add(&cs, &c, ch); // (never cut short: a truncated flag would not be the change judged)
            }
        }
        judge(&cs, nsingles, m, prof, q, fits, &nfits);
    }
    if (nfits == 0) { // what stops even the most that can move: every state on NVMe, micro-batch 1
        config_t c = *cfg;
        c.params_tier = c.grads_tier = c.optim_tier = TIER_NVME;
        c.acts_tier = ACTS_HOST;
        const int64_t mbs = (int64_t)cfg->accum * cfg->B; // micro-batch 1 where --accum takes the count
        c.B = mbs <= TT_ACCUM_MAX ? 1 : cfg->B;
        c.accum = mbs <= TT_ACCUM_MAX ? (int)mbs : cfg->accum;
        plan_compute(&c, m, prof, q);
        snprintf(p->stuck, sizeof p->stuck, "%s", q->feasible ? "" : q->reason);
    }
    qsort(fits, (size_t)nfits, sizeof *fits, by_floor);
    for (int k = 0; k < nfits && p->nsugg < 3; k++) {
        snprintf(p->sugg[p->nsugg].change, sizeof p->sugg[p->nsugg].change, "%s", cs.c[fits[k].i].change);
        p->sugg[p->nsugg++].floor_ms = fits[k].floor_ms;
    }
out:
    free(cs.c);
    free(fits);
}

// The largest --batch that fits: doubling, then bisection between the last fit and the first
// misfit. Under --recompute auto a run at that batch decides again, so it is judged with the
// least auto can fall back to: every block recomputing, the logits computed again.
static void advise_fit(const config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, plan_t *q) {
    config_t c = *cfg;
    if (c.recompute_auto) config_keep_nothing(&c);
    int ok = cfg->B, bad = 0;
    while (!bad && ok < 65536) {
        c.B = ok * 2 > 65536 ? 65536 : ok * 2;
        plan_compute(&c, m, prof, q);
        if (q->feasible) ok = c.B;
        else bad = c.B;
    }
    while (bad && bad - ok > 1) {
        c.B = ok + (bad - ok) / 2;
        plan_compute(&c, m, prof, q);
        if (q->feasible) ok = c.B;
        else bad = c.B;
    }
    p->max_batch = ok;
}

void plan_advise(const config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p) {
    p->nsugg = 0;
    p->max_batch = 0;
    p->stuck[0] = 0;
    plan_t *q = malloc(sizeof *q); // each candidate's plan (large: it holds the layout)
    if (!q) return;
    if (p->feasible) advise_fit(cfg, m, prof, p, q);
    else advise_misfit(cfg, m, prof, p, q);
    free(q);
}
