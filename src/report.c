// report.c — see report.h.
#include "report.h"
#include <math.h>
#include <string.h>
#include "backend.h" // uses: backend_blas_text
#include "kernels.h" // adamw_update_path, attention_held_bytes
#include "util.h"

static const char *tier_name(tier_kind_t t) { return t == TIER_DEVICE ? "device" : t == TIER_HOST ? "host" : "nvme"; }

void report_tiers(FILE *out, const config_t *cfg, const trainer_info_t *info, const plan_t *plan, double step_ms) {
    char a[32], b[32], c[32], d[32];
    static const char *sched_name[] = {"auto", "horizontal", "vertical"};
    const tier_stats_t *ts = &info->tier;
    char blas[224] = "", bt[192]; // the CPU's products: our kernels or OpenBLAS, and its family
    if (!strcmp(info->backend, "cpu")) snprintf(blas, sizeof blas, ", %s", backend_blas_text(bt, sizeof bt));
    fprintf(out, "tiers (backend %s, %d thread%s%s): params %s, grads %s, optimizer %s, checkpoints %s, prefetch %d, "
                 "schedule %s\n",
            info->backend, info->threads, info->threads == 1 ? "" : "s", blas, tier_name(cfg->params_tier), tier_name(cfg->grads_tier),
            tier_name(cfg->optim_tier), cfg->acts_tier == ACTS_HOST ? "host" : "device", cfg->prefetch,
            sched_name[cfg->schedule]);
    fprintf(out, "  tier     peak        budget      moved                               compute waited\n");
    fprintf(out, "  device   %-10s  %-10s  in %-10s out %-10s          %.1f ms for parameter fetches\n",
            format_bytes(a, sizeof a, info->device_peak),
            cfg->hbm_budget ? format_bytes(b, sizeof b, cfg->hbm_budget) : "none",
            format_bytes(c, sizeof c, ts->h2d_bytes), format_bytes(d, sizeof d, ts->d2h_bytes), info->sched.wait_ms);
    fprintf(out, "  host     %-10s  %-10s  checkpoints in %s, out %s      %.1f ms copying gradients and checkpoints\n",
            format_bytes(a, sizeof a, info->host_bytes),
            cfg->host_budget ? format_bytes(b, sizeof b, cfg->host_budget) : "none",
            format_bytes(c, sizeof c, ts->act_h2d_bytes), format_bytes(d, sizeof d, ts->act_d2h_bytes), ts->copy_ms);
    if (info->has_nvme)
        fprintf(out, "  nvme     %-10s  (%s, %d path%s)  read %-10s written %s\n",
                format_bytes(a, sizeof a, info->nvme.size), info->nvme.engine, info->nvme.npaths,
                info->nvme.npaths == 1 ? "" : "s", format_bytes(b, sizeof b, ts->nvme_read_bytes),
                format_bytes(c, sizeof c, ts->nvme_write_bytes));
    if (info->has_nvme) {
        fprintf(out, "           achieved %.2f GB/s reading, %.2f GB/s writing (bytes / time with requests in flight)",
                report_nvme_GBps(info, IO_READ), report_nvme_GBps(info, IO_WRITE));
        if (plan->prof)
            fprintf(out, "; calibrated %.2f and %.2f", plan->prof->nvme_read_Bps / 1e9, plan->prof->nvme_write_Bps / 1e9);
        fputc('\n', out);
    }
    if (info->nslots) {
        fprintf(out, "  sched    %d slots, %llu fetches, %llu hits, %llu evictions", info->nslots,
                (unsigned long long)info->sched.fetches, (unsigned long long)info->sched.hits,
                (unsigned long long)info->sched.evictions);
        if (info->nhcache)
            fprintf(out, "; host cache %d shards, %llu hits", info->nhcache, (unsigned long long)ts->cache_hits);
        if (ts->fresh_bytes)
            fprintf(out, "; %s copied from the update's new copies, not read back from NVMe",
                    format_bytes(a, sizeof a, ts->fresh_bytes));
        fputc('\n', out);
    }
    // a host or NVMe update runs on the update worker beside the next forward (the CPU backend's
    // host update on the compute thread before it: lay.upd_inline): its waits are
    // its own, not the compute thread's (which waits for an updated shard in its fetch)
    // --optimizer device on a device backend updates there (its ops table's AdamW), else the CPU's
    const int on_device = cfg->optim_tier == TIER_DEVICE && strcmp(info->backend, "cpu") != 0;
    fprintf(out, "  optimizer %.1f ms in all (%s AdamW, %s)", ts->opt_ms, on_device ? info->backend : adamw_update_path(),
            info->upd_bwd ? "in the backward" : info->upd_inline ? "after the backward, with the step's threads" : "after the backward");
    if (cfg->optim_tier == TIER_NVME)
        fprintf(out, ", of which %.1f ms the update worker waited for its states' NVMe transfers", ts->opt_nvme_wait_ms);
    const uint64_t pieces = info->sched.assists + info->sched.assists_self;
    if (pieces) // the CPU backend's NVMe update (sched_assist)
        fprintf(out, "; its AdamW on the compute thread's cores for %llu of %llu chunks (%.1f ms; the worker waited "
                     "%.1f ms for them to be taken)",
                (unsigned long long)info->sched.assists, (unsigned long long)pieces, info->sched.assist_ms,
                info->sched.assist_wait_ms);
    if (info->upd_bwd) fprintf(out, "; compute waited %.1f ms for gradient slots it held", ts->grad_slot_wait_ms);
    fputc('\n', out);
    fprintf(out, "  step     %.1f ms achieved, floor %.1f ms (bound by %s; rates: %s): efficiency %.2f\n", step_ms,
            plan->floor_ms, plan_resource_names[plan->bound], plan->prof ? plan->prof->source : "built-in defaults",
            step_ms > 0 ? plan->floor_ms / step_ms : 0.0);
    char phases[256];
    plan_phases_text(plan, 0, phases, sizeof phases);
    fprintf(out, "           the floor's phases, one after the other: %s\n", phases);
}

double report_nvme_GBps(const trainer_info_t *info, int op) {
    const io_stats_t *s = &info->nvme_stats;
    const double bytes = (double)(op == IO_READ ? s->bytes_read : s->bytes_written);
    return s->busy_ms[op] > 0 ? bytes / (s->busy_ms[op] / 1e3) / 1e9 : 0;
}

void report_summary(FILE *log, const trainer_info_t *info, const plan_t *plan, const report_run_t *r) {
    const tier_stats_t *ts = &info->tier;
    fprintf(log, "{\"event\":\"summary\",\"params\":%zu,\"steps\":%d,\"first_loss\":%.6f,\"final_loss\":%.6f,"
                 "\"val_loss\":%.6f,\"tok_per_s\":%.1f,\"step_ms\":%.3f,\"peak_device_bytes\":%llu,"
                 "\"peak_host_bytes\":%llu,\"nvme_bytes_read\":%llu,\"nvme_bytes_written\":%llu,"
                 "\"h2d_bytes\":%llu,\"d2h_bytes\":%llu,\"fetch_wait_ms\":%.3f,\"optimizer_nvme_wait_ms\":%.3f,"
                 "\"copy_ms\":%.3f,\"optimizer_ms\":%.3f,\"host_cache_hits\":%llu,\"nvme_bytes_fresh\":%llu,\"floor_ms\":%.3f,"
                 "\"efficiency\":%.4f,\"bound\":\"%s\",\"nvme_read_GBps\":%.3f,\"nvme_write_GBps\":%.3f,"
                 "\"assists\":%llu,\"assists_self\":%llu,\"assist_ms\":%.3f,\"assist_wait_ms\":%.3f,"
                 "\"optimizer_reads_ahead\":%llu,\"kernels_bytes\":%llu,",
            r->params, r->steps, r->first_loss, r->final_loss, isfinite(r->val_loss) ? r->val_loss : -1.0,
            r->tok_per_s, r->step_ms, (unsigned long long)info->device_peak, (unsigned long long)info->host_bytes,
            (unsigned long long)ts->nvme_read_bytes, (unsigned long long)ts->nvme_write_bytes,
            (unsigned long long)ts->h2d_bytes, (unsigned long long)ts->d2h_bytes, info->sched.wait_ms,
            ts->opt_nvme_wait_ms, ts->copy_ms, ts->opt_ms, (unsigned long long)ts->cache_hits,
            (unsigned long long)ts->fresh_bytes, plan->floor_ms,
            r->step_ms > 0 ? plan->floor_ms / r->step_ms : 0.0, plan_resource_names[plan->bound],
            report_nvme_GBps(info, IO_READ), report_nvme_GBps(info, IO_WRITE),
            (unsigned long long)info->sched.assists, (unsigned long long)info->sched.assists_self, info->sched.assist_ms,
            info->sched.assist_wait_ms, (unsigned long long)ts->opt_reads_ahead,
            (unsigned long long)attention_held_bytes()); // the CPU kernels' own buffers (plan.h kernels_bytes)
    if (r->ranks > 1) { // rank 0's figures above; each rank's peaks here
        fprintf(log, "\"ranks\":%d,\"gather_wait_ms\":%.3f", r->ranks, info->tier.gather_wait_ms);
        const char *key[2] = {"rank_peak_device_bytes", "rank_peak_host_bytes"};
        const uint64_t *val[2] = {r->rank_device, r->rank_host};
        for (int k = 0; k < 2; k++) {
            fprintf(log, ",\"%s\":[", key[k]);
            for (int i = 0; i < r->ranks; i++) fprintf(log, "%s%llu", i ? "," : "", (unsigned long long)val[k][i]);
            fprintf(log, "]");
        }
        fprintf(log, ",");
    }
    fprintf(log, "\"params_hash\":\"%016llx\"}\n", (unsigned long long)r->hash);
}
