// config.c — config_print (see config.h): the resolved configuration, the first thing every
// run prints.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli_table.h"
#include "config.h"
#include "model.h"
#include "util.h" // uses: format_bytes

static const char *enum_word(const char *values, int idx, char *buf, size_t len) {
    const char *p = values;
    for (int i = 0; i < idx && *p; i++) {
        p += strcspn(p, "|");
        if (*p == '|') p++;
    }
    snprintf(buf, len, "%.*s", (int)strcspn(p, "|"), p);
    return buf;
}

static const char *budget_text(char *buf, size_t len, uint64_t b) {
    if (b == 0) snprintf(buf, len, "none");
    else format_bytes(buf, len, b);
    return buf;
}

static void print_io(const config_t *c, FILE *f) {
    char blk[32], e[16];
    const char *tmp = getenv("TMPDIR");
    fprintf(f, "  io: nvme-path %s%s, qd %d, block %s, engine %s, numa ",
            c->nvme_path[0] ? c->nvme_path : (tmp && *tmp ? tmp : "/tmp"), c->nvme_path[0] ? "" : " (default)",
            c->nvme_qd, format_bytes(blk, sizeof blk, c->io_block), enum_word("auto|uring|psync", c->io_engine, e, sizeof e));
    if (c->numa_node < 0) fprintf(f, "auto");
    else fprintf(f, "%d", c->numa_node);
    fprintf(f, "%s%s%s\n", c->io_sqpoll ? ", sqpoll" : "", c->io_verify ? ", verify" : "", c->keep_nvme ? ", keep-nvme" : "");
}

const char *tier_kind_name(tier_kind_t k) {
    static const char *const name[] = {"device", "host", "nvme"};
    return k >= TIER_DEVICE && k <= TIER_NVME ? name[k] : "?";
}

const char *config_model_source(const config_t *c) {
    return c->init_from[0] ? "--init-from" : c->model_resumed ? "--resume" : NULL;
}

void config_print(const config_t *c, FILE *f) {
    char b1[32], b2[32], w[16];
    const command_info_t *ci = cli_command_of(c->command);
    const char *cmd = ci ? ci->name : "config";
    if (c->command == CMD_TOKENIZE) {
        fprintf(f, "tiertrain tokenize: %s -> %s\n", c->tok_in, c->tok_out);
        return;
    }
    if (c->command == CMD_BENCH) {
        fprintf(f, "tiertrain bench %s: threads ", c->bench_name);
        if (c->threads) fprintf(f, "%d", c->threads);
        else fprintf(f, "all cores");
        if (strcmp(c->bench_name, "io") == 0) fprintf(f, ", size %s", format_bytes(b1, sizeof b1, c->bench_size));
        fputc('\n', f);
        if (strcmp(c->bench_name, "io") == 0) print_io(c, f);
        return;
    }
    // Model: say whether the shape is the preset's or was changed by flags.
    config_t p;
    memcpy(&p, c, sizeof p);
    int custom = model_preset(c->preset, &p) != 0 || p.L != c->L || p.C != c->C || p.NH != c->NH || p.NKV != c->NKV ||
                 p.F != c->F || p.V != c->V || p.T != c->T;
    char from[TT_PATH_MAX + 32];
    if (c->init_from[0]) snprintf(from, sizeof from, "from %s/config.json", c->init_from);
    else snprintf(from, sizeof from, "from --resume's checkpoint");
    const int folder = config_model_source(c) != NULL;
    char rope[160];
    model_rope_text(c->rope_theta, &c->rope_scaling, rope, sizeof rope);
    fprintf(f, "tiertrain %s: model %s%s: L %d, C %d, heads %d (kv %d, size %d), ffn %d, vocab %d, seq %d, %s, "
               "%s, norm-eps %g, %s, seed %llu\n",
            cmd, folder ? from : c->preset, custom && !folder ? " (changed by flags)" : "", c->L, c->C, c->NH, c->NKV,
            c->NH ? c->C / c->NH : 0, c->F, c->V, c->T, c->tie ? "tied" : "untied", rope, c->norm_eps,
            enum_word("bf16|fp32", c->precision, w, sizeof w), (unsigned long long)c->seed);
    fprintf(f, "  data: %s; batch %d x seq %d x accum %d = %lld tokens/step; %d steps; eval ", c->data, c->B, c->T,
            c->accum, (long long)c->B * c->T * c->accum, c->steps);
    if (c->eval_every) fprintf(f, "every %d steps x %d batches\n", c->eval_every, c->eval_batches);
    else fprintf(f, "never\n");
    fprintf(f, "  optimizer: adamw, lr %g -> %g (warmup %d, cosine), wd %g, clip ", c->lr, c->min_lr, c->warmup, c->wd);
    if (c->clip > 0) fprintf(f, "%g", c->clip);
    else fprintf(f, "off");
    fprintf(f, ", betas %g %g, eps %g\n", c->beta1, c->beta2, c->eps);
    fprintf(f, "  run: device %s, threads ", enum_word("auto|cpu|cuda", c->device, w, sizeof w));
    if (c->threads) fprintf(f, "%d", c->threads);
    else fprintf(f, "all cores");
    fprintf(f, ", cpu-gemm %s", enum_word("auto|fma", c->cpu_gemm, w, sizeof w));
    fprintf(f, ", hbm-budget %s, host-budget %s, log %s%s\n", budget_text(b1, sizeof b1, c->hbm_budget),
            budget_text(b2, sizeof b2, c->host_budget), c->log_path[0] ? c->log_path : "none", c->quiet ? ", quiet" : "");
    if (c->offload_auto) {
        fprintf(f, "  tiers: --offload auto (chosen below), prefetch %d", c->prefetch);
    } else {
        fprintf(f, "  tiers: params %s, grads %s, optimizer %s, prefetch %d", tier_kind_name(c->params_tier),
                tier_kind_name(c->grads_tier), tier_kind_name(c->optim_tier), c->prefetch);
    }
    fprintf(f, ", schedule %s, checkpoints %s, recompute %s, update %s",
            enum_word("auto|horizontal|vertical", (int)c->schedule, w, sizeof w),
            enum_word("auto|device|host", (int)c->acts_tier, b2, sizeof b2), c->recompute_arg[0] ? c->recompute_arg : "full",
            enum_word("auto|after|backward", (int)c->update_when, b1, sizeof b1));
    if (c->host_cache_auto) fprintf(f, ", host-cache auto");
    else if (c->host_cache) fprintf(f, ", host-cache %s", format_bytes(b1, sizeof b1, c->host_cache));
    if (c->optim_cache_auto) fprintf(f, ", optimizer-cache auto");
    else if (c->optim_cache) fprintf(f, ", optimizer-cache %s", format_bytes(b1, sizeof b1, c->optim_cache));
    fputc('\n', f);
    if (c->init_from[0]) fprintf(f, "  init: weights from --init-from %s, optimizer state fresh\n", c->init_from);
    if (c->save_dir[0] || c->resume[0]) {
        fprintf(f, "  save/resume:");
        if (c->save_dir[0]) {
            fprintf(f, " save %s ", c->save_dir);
            if (c->save_every) fprintf(f, "every %d steps and at the end", c->save_every);
            else fprintf(f, "at the end");
            if (c->keep_last) fprintf(f, " (keep the newest %d, %s)", c->keep_last, c->save_bf16 ? "bf16" : "fp32");
            else fprintf(f, " (keep all, %s)", c->save_bf16 ? "bf16" : "fp32");
        }
        if (c->resume[0]) fprintf(f, "%s resume %s", c->save_dir[0] ? ";" : "", c->resume);
        fputc('\n', f);
    }
    print_io(c, f);
}

void config_keep_nothing(config_t *c) { c->kept_blocks = c->kept_bf16 = c->logits_kept = 0; }

void config_bench_train_defaults(config_t *c) {
    if (!c->shape_given) {
        c->L = 12; c->C = 768; c->NH = 12; c->NKV = 12; c->F = 2048; c->V = 256;
        snprintf(c->preset, sizeof c->preset, "M");
    }
    if (!c->seq_given && !c->shape_given) c->T = 256;
    if (!c->batch_given) c->B = 4;
}

void config_resolve_schedule(config_t *c) {
    if (c->schedule_auto) c->schedule = c->accum > 1 ? SCHEDULE_VERTICAL : SCHEDULE_HORIZONTAL;
    if (c->acts_auto) c->acts_tier = c->schedule == SCHEDULE_VERTICAL ? ACTS_HOST : ACTS_DEVICE;
}
