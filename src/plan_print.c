// plan_print.c — see plan.h: a plan as text (plan_print, plan_phases_text) and as one JSON
// line (plan_json). What it says is computed in plan.c; this file only words it.
#include <stdio.h>
#include <string.h>
#include "plan.h"
#include "json.h" // json_escape
#include "util.h" // format_bytes

// One tier's parts, as "    name   bytes" rows (the layout's order).
static void print_parts(const plan_t *p, tier_kind_t tier, FILE *f) {
    const char *names[TB_COUNT + 1];
    char a[32];
    tier_part_names(&p->lay, tier, names, TB_COUNT + 1);
    for (int i = 0; names[i]; i++)
        fprintf(f, "    %-18s %12s\n", names[i], format_bytes(a, sizeof a, tier_part_bytes(&p->lay, tier, names[i])));
    if (tier == TIER_DEVICE && p->backend_bytes)
        fprintf(f, "    %-18s %12s\n", "backend", format_bytes(a, sizeof a, p->backend_bytes));
}

void plan_phases_text(const plan_t *p, int seconds, char *buf, size_t len) {
    const double u = seconds ? 1e3 : 1;
    const char *unit = seconds ? "s" : "ms";
    const char *with[PLAN_NPHASES]; // the CPU's AdamW in a compute-bound phase counts with the compute
    for (int ph = 0; ph < PLAN_NPHASES; ph++)
        with[ph] = p->phase_adam_shared[ph] && p->phase_bound[ph] == PLAN_COMPUTE ? " with AdamW on its cores" : "";
    snprintf(buf, len, "%s %.1f %s (%s%s) + %s %.1f %s (%s%s)", p->phase_names[PLAN_PHASE_UPDATE],
             p->phase_floor_ms[PLAN_PHASE_UPDATE] / u, unit, plan_resource_names[p->phase_bound[PLAN_PHASE_UPDATE]],
             with[PLAN_PHASE_UPDATE], p->phase_names[PLAN_PHASE_REST], p->phase_floor_ms[PLAN_PHASE_REST] / u, unit,
             plan_resource_names[p->phase_bound[PLAN_PHASE_REST]], with[PLAN_PHASE_REST]);
}

// The compute's parts, after its line of the floor table.
static void compute_parts(const plan_t *p, FILE *f) {
    profile_t defaults;
    const profile_t *prof = p->prof;
    if (!prof) { profile_defaults(&defaults); prof = &defaults; }
    fprintf(f, " (matmuls %.1f, attention %.1f, elementwise ops %.1f", p->compute_ms[PLAN_CPART_MATMUL],
            p->compute_ms[PLAN_CPART_ATTENTION], p->compute_ms[PLAN_CPART_ELEM]);
    if (!(prof->attn_flops > 0) || !(prof->elem_Bps > 0))
        fprintf(f, "; the profile has no attention or elementwise rate: attention at the matmuls' rate, the "
                   "elementwise ops uncounted; tiertrain bench calibrate measures them");
    fputc(')', f);
}

void plan_print(const plan_t *p, const config_t *cfg, FILE *f) {
    char a[32], b[32], c[32], d[32];
    fprintf(f, "state                       bytes   home\n");
    fprintf(f, "  parameters (%s)    %12s   %s\n", cfg->precision == PREC_BF16 ? "bf16" : "fp32",
            format_bytes(a, sizeof a, p->params_bytes), tier_kind_name(cfg->params_tier));
    fprintf(f, "  gradients (fp32)     %12s   %s", format_bytes(a, sizeof a, p->grads_bytes),
            tier_kind_name(cfg->grads_tier));
    if (cfg->grads_tier == TIER_NVME && p->lay.gext_shards < p->lay.nshards) { // tier_layout: --update backward
        if (!p->grads_nvme_bytes) fprintf(f, " (none on disk: each final gradient passes to the update in its slot)");
        else fprintf(f, " (%s on disk, the tied embedding's partial sums: the rest passes to the update in its slot)",
                     format_bytes(b, sizeof b, p->grads_nvme_bytes));
    }
    fprintf(f, "\n");
    fprintf(f, "  master + m + v       %12s   %s\n", format_bytes(a, sizeof a, p->optim_bytes),
            tier_kind_name(cfg->optim_tier));
    fprintf(f, "  activations          %12s   device\n", format_bytes(a, sizeof a, p->acts_bytes));
    fprintf(f, "  device total         %12s   (--hbm-budget %s)\n", format_bytes(a, sizeof a, p->device_bytes),
            cfg->hbm_budget ? format_bytes(b, sizeof b, cfg->hbm_budget) : "none");
    print_parts(p, TIER_DEVICE, f);
    fprintf(f, "  host total           %12s   (--host-budget %s)\n", format_bytes(a, sizeof a, p->host_bytes),
            cfg->host_budget ? format_bytes(b, sizeof b, cfg->host_budget) : "none");
    print_parts(p, TIER_HOST, f);
    fprintf(f, "  nvme total           %12s   of %s free (--nvme-path %s)\n", format_bytes(a, sizeof a, p->nvme_bytes),
            p->nvme_bytes ? format_bytes(b, sizeof b, p->nvme_free) : "-", cfg->nvme_path[0] ? cfg->nvme_path : "default");
    fprintf(f, "  RAM (%s)    %12s   of %s available\n", cfg->device == DEVICE_CUDA ? "host only  " : "cpu backend",
            format_bytes(a, sizeof a, p->ram_needed), format_bytes(b, sizeof b, p->mem_available));
    if (p->kernels_bytes) // outside the arena: the attention ops' buffers, held from their first call
        fprintf(f, "    %-18s %12s   (the attention ops' buffers, %d thread%s)\n", "kernels",
                format_bytes(a, sizeof a, p->kernels_bytes), p->kernels_threads, p->kernels_threads == 1 ? "" : "s");
    if (cfg->save_dir[0])
        fprintf(f, "  checkpoints          %12s   of %s free (--save %s: %d of %s at the fullest)\n",
                format_bytes(a, sizeof a, p->save_need), format_bytes(b, sizeof b, p->save_free), cfg->save_dir,
                p->save_count, format_bytes(c, sizeof c, p->save_bytes));
    // which activations those bytes count as BF16 halves (tier.h act16, att16): what bf16 mode
    // could halve where the step runs elsewhere
    const char *acts =
        cfg->precision != PREC_BF16 ? ""
        : p->lay.att16              ? " (activations as BF16 halves)"
        : p->lay.act16              ? " (the norms' outputs and the MLP's as BF16 halves; attention's as FP32 words: "
                                      "its halves need a head size up to 256, on a GPU an even one up to 128)"
                                    : " (activations as FP32 words: BF16 halves need FMA (with AMX tiles a width up to 1024) "
                                      "or a GPU)";
    fprintf(f, "compute per step: %.3g TFLOP (matmuls incl. the recompute of %d of %d blocks, causal attention), "
               "elementwise ops reading and writing %s%s\n",
            p->flops_per_step / 1e12, cfg->L - (cfg->kept_blocks < cfg->L ? cfg->kept_blocks : cfg->L), cfg->L,
            format_bytes(a, sizeof a, (uint64_t)p->elem_bytes), acts);
    fprintf(f, "traffic per step: host->device %s, device->host %s, nvme read %s, nvme write %s (%llu parameter "
               "fetches)\n",
            format_bytes(a, sizeof a, p->h2d_bytes), format_bytes(b, sizeof b, p->d2h_bytes),
            format_bytes(c, sizeof c, p->nvme_read_bytes), format_bytes(d, sizeof d, p->nvme_write_bytes),
            (unsigned long long)p->param_fetches);
    if (p->ranks > 1)
        fprintf(f, "ranks: %d (%d on this node, sharing its RAM and NVMe: %s of RAM and %s of NVMe in all), each holding "
                   "its 1/%d piece of every state (the figures above are rank 0's); per step each rank sends %s and "
                   "receives as much (gradient folds, parameter gathers), %d micro-batches per step in all\n",
                p->ranks, p->local_ranks, format_bytes(a, sizeof a, p->ram_needed * (uint64_t)p->local_ranks),
                format_bytes(b, sizeof b, p->nvme_bytes * (uint64_t)p->local_ranks), p->ranks,
                format_bytes(c, sizeof c, p->comm_bytes), cfg->accum * p->ranks);
    if (cfg->optim_tier != TIER_DEVICE)
        fprintf(f, "update: %s", p->lay.upd_bwd     ? "in the backward, each shard once its gradient is final (--update)"
                                 : p->lay.upd_inline ? "after the backward, with the step's threads before the next forward (the "
                                                       "CPU backend: beside it, it would take a core from it)"
                                 : p->lay.upd_assist ? "after the backward, beside the next forward, its AdamW on the compute "
                                                       "thread's cores between the forward's products (--update)"
                                                     : "after the backward, beside the next forward (--update)");
    if (cfg->optim_tier != TIER_DEVICE && p->nvme_handed_bytes)
        fprintf(f, "; it hands that forward %s of new parameters as it writes them to NVMe, not read back (where "
                   "the update paces the forward)", format_bytes(a, sizeof a, p->nvme_handed_bytes));
    if (cfg->optim_tier != TIER_DEVICE) fputc('\n', f);
    fprintf(f, "predicted floor per step (rates from %s):\n", p->prof ? p->prof->source : "built-in defaults; run tiertrain bench calibrate");
    for (int r = 0; r < PLAN_NRES; r++) {
        fprintf(f, "  %-13s %10.1f ms%s", plan_resource_names[r], p->t_ms[r], r == p->bound ? "   <- bound" : "");
        if (r == PLAN_COMPUTE) compute_parts(p, f);
        fputc('\n', f);
    }
    fprintf(f, "  floor         %10.1f ms/step, bound by %s\n", p->floor_ms, plan_resource_names[p->bound]);
    char phases[256];
    plan_phases_text(p, 0, phases, sizeof phases);
    fprintf(f, "  phases        %s\n", phases); // the floor is their sum
    char note[512];
    if (plan_nvme_scale_note(p, note, sizeof note)) fprintf(f, "  note: %s\n", note);
    if (p->feasible) fprintf(f, "feasible: yes\n");
    else fprintf(f, "feasible: no — %s\n", p->reason);
    if (p->nsugg) fprintf(f, "what makes it fit (cheapest predicted floor first; add the flags to the command):\n");
    for (int i = 0; i < p->nsugg; i++)
        fprintf(f, "  %-48s floor %10.1f ms/step\n", p->sugg[i].change, p->sugg[i].floor_ms);
    if (!p->feasible && !p->nsugg)
        fprintf(f, "no change of placement, batch or budget makes it fit%s%s; a smaller --model or --seq does\n",
                p->stuck[0] ? ": even with every state on NVMe at --batch 1, " : "", p->stuck);
    if (p->max_batch) fprintf(f, "largest --batch that fits: %d\n", p->max_batch);
}

// {"name":bytes,...} of one tier's parts.
static void json_parts(const plan_t *p, tier_kind_t tier, FILE *f) {
    const char *names[TB_COUNT + 1];
    tier_part_names(&p->lay, tier, names, TB_COUNT + 1);
    fputc('{', f);
    for (int i = 0; names[i]; i++)
        fprintf(f, "%s\"%s\":%llu", i ? "," : "", names[i],
                (unsigned long long)tier_part_bytes(&p->lay, tier, names[i]));
    if (tier == TIER_DEVICE && p->backend_bytes)
        fprintf(f, "%s\"backend\":%llu", names[0] ? "," : "", (unsigned long long)p->backend_bytes);
    fputc('}', f);
}

void plan_json(const plan_t *p, const config_t *cfg, const model_t *m, FILE *f) {
    char reason[sizeof p->reason * 2 + 8];
    if (json_escape(reason, sizeof reason, p->feasible ? "" : p->reason, p->feasible ? 0 : strlen(p->reason)) < 0)
        snprintf(reason, sizeof reason, "\"?\"");
    fprintf(f, "{\"plan\":\"%s\",\"params\":%zu,\"feasible\":%s,\"reason\":%s,\"params_home\":\"%s\","
               "\"grads_home\":\"%s\",\"optimizer_home\":\"%s\",\"device_bytes\":%llu,\"host_bytes\":%llu,"
               "\"nvme_bytes\":%llu,\"ram_bytes\":%llu,\"ram_available\":%llu,\"kernels_bytes\":%llu,\"nvme_free\":%llu,"
               "\"device_parts\":",
            config_model_source(cfg) ? config_model_source(cfg) : cfg->preset[0] ? cfg->preset : "custom",
            m->num_params, p->feasible ? "true" : "false", reason,
            tier_kind_name(cfg->params_tier), tier_kind_name(cfg->grads_tier), tier_kind_name(cfg->optim_tier),
            (unsigned long long)p->device_bytes,
            (unsigned long long)p->host_bytes, (unsigned long long)p->nvme_bytes, (unsigned long long)p->ram_needed,
            (unsigned long long)p->mem_available, (unsigned long long)p->kernels_bytes, (unsigned long long)p->nvme_free);
    json_parts(p, TIER_DEVICE, f);
    fprintf(f, ",\"host_parts\":");
    json_parts(p, TIER_HOST, f);
    fprintf(f, ",\"h2d_bytes\":%llu,\"d2h_bytes\":%llu,\"nvme_read_bytes\":%llu,\"nvme_write_bytes\":%llu,"
               "\"nvme_handed_bytes\":%llu,"
               "\"save_bytes\":%llu,\"save_need\":%llu,\"save_free\":%llu,"
               "\"flops\":%.6g,\"floor_ms\":%.3f,\"bound\":\"%s\",\"rates\":\"%s\",",
            (unsigned long long)p->h2d_bytes, (unsigned long long)p->d2h_bytes, (unsigned long long)p->nvme_read_bytes,
            (unsigned long long)p->nvme_write_bytes, (unsigned long long)p->nvme_handed_bytes,
            (unsigned long long)p->save_bytes,
            (unsigned long long)p->save_need, (unsigned long long)p->save_free, p->flops_per_step, p->floor_ms,
            plan_resource_names[p->bound], p->prof ? "profile" : "defaults");
    fprintf(f, "\"hbm_budget\":%llu,\"host_budget\":%llu,\"kept_blocks\":%d,\"kept_bf16\":%s,\"logits_kept\":%s,"
               "\"mlp_rows\":%d,\"ranks\":%d,\"local_ranks\":%d,\"comm_bytes\":%llu,\"update\":\"%s\",\"t_ms\":{",
            (unsigned long long)cfg->hbm_budget, (unsigned long long)cfg->host_budget, cfg->kept_blocks,
            cfg->kept_bf16 ? "true" : "false", cfg->logits_kept ? "true" : "false",
            model_mlp_rows(m, cfg->B * cfg->T), p->ranks, p->local_ranks, (unsigned long long)p->comm_bytes,
            cfg->optim_tier == TIER_DEVICE ? "device" : p->lay.upd_bwd ? "backward" : p->lay.upd_inline ? "inline" : "after");
    for (int r = 0; r < PLAN_NRES; r++) fprintf(f, "%s\"%s\":%.3f", r ? "," : "", plan_resource_names[r], p->t_ms[r]);
    fprintf(f, "},\"act16\":%s,\"att16\":%s", p->lay.act16 ? "true" : "false", p->lay.att16 ? "true" : "false");
    fprintf(f, ",\"elem_bytes\":%.6g,\"compute_ms\":{\"matmuls\":%.3f,\"attention\":%.3f,\"elementwise\":%.3f}",
            p->elem_bytes, p->compute_ms[PLAN_CPART_MATMUL], p->compute_ms[PLAN_CPART_ATTENTION],
            p->compute_ms[PLAN_CPART_ELEM]);
    fprintf(f, ",\"phases\":[");
    for (int ph = 0; ph < PLAN_NPHASES; ph++) {
        fprintf(f, "%s{\"name\":\"%s\",\"ms\":%.3f,\"bound\":\"%s\",\"t_ms\":{", ph ? "," : "", p->phase_names[ph],
                p->phase_floor_ms[ph], plan_resource_names[p->phase_bound[ph]]);
        for (int r = 0; r < PLAN_NRES; r++)
            fprintf(f, "%s\"%s\":%.3f", r ? "," : "", plan_resource_names[r], p->phase_ms[ph][r]);
        fprintf(f, "}}");
    }
    fprintf(f, "],\"suggestions\":[");
    for (int i = 0; i < p->nsugg; i++) // the changes are flags: nothing in them needs escaping
        fprintf(f, "%s{\"change\":\"%s\",\"floor_ms\":%.3f}", i ? "," : "", p->sugg[i].change, p->sugg[i].floor_ms);
    fprintf(f, "],\"max_batch\":%d}\n", p->max_batch);
}
