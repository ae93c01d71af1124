// plan.c — see plan.h. The byte counts mirror trainer_init's allocations (step.c);
// test_tiers (plan_matches_allocation) holds them to what is really allocated.
#include "plan.h"
#include <stdio.h>
#include <string.h>
#include "hostmem.h"
#include "util.h"

void plan_compute(const config_t *cfg, const model_t *m, plan_t *p) {
    memset(p, 0, sizeof *p);
    const double P = (double)m->numel_padded;
    const double N = (double)cfg->B * cfg->T, C = m->C, F = m->F, V = m->V;
    const double KVD = (double)m->NKV * m->HS;
    const int pbytes = cfg->precision == PREC_BF16 ? 2 : 4;
    p->params_bytes = (uint64_t)(P * pbytes);
    p->grads_bytes = (uint64_t)(P * 4);
    p->optim_bytes = (uint64_t)(P * 12);
    // checkpoints (L+1)·N·C; one block's forward and backward buffers; head; FP32 weight
    // scratch for two shards in bf16 mode; RoPE tables, tokens, targets.
    const double big = (double)m->max_shard_numel, emb = (double)m->shards[0].numel_padded;
    double acts = (m->L + 1) * N * C + N * (11 * C + 4 * KVD + 6 * F + m->NH + 4) + N * V +
                  (double)cfg->T * m->HS + 2 * N;
    if (pbytes == 2) acts += big + emb;
    p->acts_bytes = (uint64_t)(acts * 4);
    // Where each state's home is (the same rules as trainer_init).
    int nslots = cfg->prefetch + 2 + (m->tie ? 1 : 0);
    if (nslots > m->nshards) nslots = m->nshards;
    double dev = p->acts_bytes, host = 0, nvme = 0;
    switch (cfg->params_tier) {
    case TIER_DEVICE: dev += P * pbytes; host += big * pbytes; break;
    case TIER_HOST: dev += nslots * big * pbytes; host += P * pbytes; break;
    case TIER_NVME: dev += nslots * big * pbytes; host += (nslots + 1) * big * pbytes; nvme += P * pbytes; break;
    }
    if (cfg->grads_tier == TIER_DEVICE) dev += P * 4;
    else { dev += (big + emb) * 4; host += P * 4; }
    if (cfg->optim_tier == TIER_NVME) { host += 2 * 3 * big * 4; nvme += P * 12; }
    else host += P * 12;
    p->device_bytes = (uint64_t)dev;
    p->host_bytes = (uint64_t)host;
    p->nvme_bytes = (uint64_t)nvme;
    p->ram_needed = p->device_bytes + p->host_bytes;
    p->mem_available = hostmem_mem_available();
    // 2 FLOPs per multiply-add: forward 2·P·N, recompute 2·P·N, backward 4·P·N; attention
    // (causal: half the T×T products) 4·N·T·C per pass, four passes (fwd, recompute, bwd ×2).
    double mm = 8.0 * (double)m->num_params * N * cfg->accum;
    double att = 4.0 * 4.0 * N * cfg->T * C / 2.0 * m->L * cfg->accum;
    p->flops_per_step = mm + att;

    char a[32], b[32], c[32];
    p->feasible = 1;
    if (cfg->hbm_budget && p->device_bytes > cfg->hbm_budget) {
        p->feasible = 0;
        snprintf(p->reason, sizeof p->reason,
                 "device states need %s, over --hbm-budget %s (raise --hbm-budget, lower --batch/--seq, "
                 "or move states off the device: --params host|nvme, --grads host)",
                 format_bytes(a, sizeof a, p->device_bytes), format_bytes(b, sizeof b, cfg->hbm_budget));
    } else if (cfg->host_budget && p->host_bytes > cfg->host_budget) {
        p->feasible = 0;
        snprintf(p->reason, sizeof p->reason, "host states need %s, over --host-budget %s (raise --host-budget, or --optimizer nvme / --params nvme)",
                 format_bytes(a, sizeof a, p->host_bytes), format_bytes(b, sizeof b, cfg->host_budget));
    } else if (p->mem_available && p->ram_needed > p->mem_available) {
        p->feasible = 0;
        snprintf(p->reason, sizeof p->reason,
                 "needs %s of RAM (device arena %s + host %s), %s available (--optimizer nvme and --params nvme move "
                 "states to disk; or a smaller --model, --batch or --seq)",
                 format_bytes(a, sizeof a, p->ram_needed), format_bytes(b, sizeof b, p->device_bytes),
                 format_bytes(c, sizeof c, p->host_bytes), format_bytes(a + 16, 16, p->mem_available));
    }
}

int plan_auto(config_t *cfg, const model_t *m, plan_t *p, char *why, size_t len) {
    static const struct { tier_kind_t params, grads, optim; } order[] = {
        {TIER_DEVICE, TIER_DEVICE, TIER_HOST}, {TIER_HOST, TIER_DEVICE, TIER_HOST},
        {TIER_HOST, TIER_HOST, TIER_HOST},     {TIER_DEVICE, TIER_DEVICE, TIER_NVME},
        {TIER_HOST, TIER_DEVICE, TIER_NVME},   {TIER_HOST, TIER_HOST, TIER_NVME},
        {TIER_NVME, TIER_DEVICE, TIER_NVME},   {TIER_NVME, TIER_HOST, TIER_NVME},
    };
    static const char *tn[] = {"device", "host", "nvme"};
    const int n = (int)(sizeof order / sizeof order[0]);
    char first_reason[512] = "";
    for (int i = 0; i < n; i++) {
        cfg->params_tier = order[i].params;
        cfg->grads_tier = order[i].grads;
        cfg->optim_tier = order[i].optim;
        plan_compute(cfg, m, p);
        if (i == 0) snprintf(first_reason, sizeof first_reason, "%s", p->reason);
        if (p->feasible) {
            if (i == 0) snprintf(why, len, "--offload auto: params device, grads device, optimizer host: everything fits");
            else
                snprintf(why, len, "--offload auto: params %s, grads %s, optimizer %s (candidate %d of %d; all resident: %s)",
                         tn[cfg->params_tier], tn[cfg->grads_tier], tn[cfg->optim_tier], i + 1, n, first_reason);
            return 1;
        }
    }
    snprintf(why, len, "--offload auto: no placement fits; the most offloaded one: %s", p->reason);
    return 0;
}

void plan_print(const plan_t *p, const config_t *cfg, FILE *f) {
    char a[32], b[32];
    static const char *tn[] = {"device", "host", "nvme"};
    fprintf(f, "state                       bytes   home\n");
    fprintf(f, "  parameters (%s)    %12s   %s\n", cfg->precision == PREC_BF16 ? "bf16" : "fp32",
            format_bytes(a, sizeof a, p->params_bytes), tn[cfg->params_tier]);
    fprintf(f, "  gradients (fp32)     %12s   %s\n", format_bytes(a, sizeof a, p->grads_bytes), tn[cfg->grads_tier]);
    fprintf(f, "  master + m + v       %12s   %s\n", format_bytes(a, sizeof a, p->optim_bytes),
            cfg->optim_tier == TIER_NVME ? "nvme" : "host");
    fprintf(f, "  activations          %12s   device\n", format_bytes(a, sizeof a, p->acts_bytes));
    fprintf(f, "  device total         %12s   (--hbm-budget %s)\n", format_bytes(a, sizeof a, p->device_bytes),
            cfg->hbm_budget ? format_bytes(b, sizeof b, cfg->hbm_budget) : "none");
    fprintf(f, "  host total           %12s   (--host-budget %s)\n", format_bytes(a, sizeof a, p->host_bytes),
            cfg->host_budget ? format_bytes(b, sizeof b, cfg->host_budget) : "none");
    fprintf(f, "  nvme total           %12s   (--nvme-path %s; free space is checked when the store is made)\n",
            format_bytes(a, sizeof a, p->nvme_bytes), cfg->nvme_path[0] ? cfg->nvme_path : "default");
    fprintf(f, "  RAM (cpu backend)    %12s   of %s available\n", format_bytes(a, sizeof a, p->ram_needed),
            format_bytes(b, sizeof b, p->mem_available));
    fprintf(f, "compute per step: %.3g TFLOP (matmuls incl. recompute, causal attention)\n", p->flops_per_step / 1e12);
    if (p->feasible) fprintf(f, "feasible: yes\n");
    else fprintf(f, "feasible: no — %s\n", p->reason);
}
