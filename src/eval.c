// eval.c — `tiertrain eval` (see eval.h): resolve the checkpoint, build a trainer for its
// model with every state resident (B = 1), load its weights, and average the next-token
// loss over consecutive windows of T+1 tokens of a data file.
// Does not write anything or touch the optimizer state; the data file is only read.
#include "eval.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint.h"
#include "data.h"
#include "hf.h"
#include "model.h" // uses: model_rope_text
#include "progress.h"
#include "trainer.h"
#include "util.h" // uses: usage_error, runtime_error, mallocCheck, now_ms

// Bad input (exit 2) against an I/O or resource failure (exit 1), from the -errno that
// checkpoint_*, data_open and trainer_init return.
static int bad_input(int rc) {
    switch (-rc) {
    case EINVAL: case ENOENT: case ENOTDIR: case EISDIR: case EACCES: case EPERM: case ENAMETOOLONG:
    case ELOOP: case EBADMSG: case ERANGE:
        return 1;
    default:
        return 0;
    }
}

static void fail(int rc, const char *msg) {
    if (bad_input(rc)) usage_error("%s", msg);
    runtime_error("%s", msg);
}

static const char *prec_name(precision_t p) { return p == PREC_FP32 ? "fp32" : "bf16"; }

// The configuration of the checkpoint's model for evaluation: shape from the checkpoint,
// T and precision from the flags when given, one sequence per forward, everything resident
// (parameters and gradients on the device, master weights on the host, where
// checkpoint_load puts them), no streaming, no checkpoint offload.
static void eval_config(config_t *ec, const config_t *cfg, const ckpt_info_t *info) {
    *ec = *cfg;
    ec->command = CMD_EVAL;
    ec->preset[0] = 0;
    ec->L = info->L; ec->C = info->C; ec->NH = info->NH; ec->NKV = info->NKV; ec->F = info->F; ec->V = info->V;
    ec->tie = info->tie;
    ec->rope_theta = info->rope_theta;
    ec->rope_scaling = info->rope_scaling;
    ec->norm_eps = info->norm_eps;
    ec->T = cfg->seq_given ? cfg->T : info->T;
    ec->precision = cfg->precision_given ? cfg->precision : info->precision;
    ec->B = 1;
    ec->accum = 1;
    ec->steps = 1;
    ec->eval_every = 0;
    ec->eval_batches = 1;
    ec->params_tier = TIER_DEVICE;
    ec->grads_tier = TIER_DEVICE;
    ec->optim_tier = TIER_HOST;
    ec->offload_auto = 0;
    ec->schedule = SCHEDULE_HORIZONTAL;
    ec->acts_tier = ACTS_DEVICE;
    ec->host_cache = 0;
    ec->hbm_budget = 0;
    ec->host_budget = 0;
    ec->nvme_path[0] = 0;
    ec->log_path[0] = 0;
    ec->trace_path[0] = 0;
    ec->save_dir[0] = 0;
}

// --init-from: the shape cli.c read from the folder's config.json, as a checkpoint's info.
static void info_of_folder(ckpt_info_t *info, const config_t *cfg) {
    memset(info, 0, sizeof *info);
    snprintf(info->dir, sizeof info->dir, "%s", cfg->init_from);
    info->L = cfg->L; info->C = cfg->C; info->NH = cfg->NH; info->NKV = cfg->NKV; info->F = cfg->F; info->V = cfg->V;
    info->T = cfg->T;
    info->tie = cfg->tie;
    info->rope_theta = cfg->rope_theta;
    info->rope_scaling = cfg->rope_scaling;
    info->norm_eps = cfg->norm_eps;
    info->precision = cfg->precision;
}

int eval_run(const config_t *cfg) {
    FILE *out = stdout;
    char err[2048] = "", dir[TT_PATH_MAX];
    ckpt_info_t info;
    const int hf = cfg->init_from[0] != 0;
    int rc;
    if (cfg->ranks > 1)
        usage_error("eval: runs on one rank (%d were launched): run it without mpirun, or with -np 1", cfg->ranks);
    if (hf) {
        info_of_folder(&info, cfg);
    } else {
        if ((rc = checkpoint_resolve(cfg->resume, dir, sizeof dir, err, sizeof err)) != 0) fail(rc, err);
        if ((rc = checkpoint_info(dir, &info, err, sizeof err)) != 0) fail(rc, err);
    }
    config_t ec;
    eval_config(&ec, cfg, &info);
    const int T = ec.T;
    if (!hf && T > info.max_pos) // as --init-from of the same folder says (cli.c)
        notice("--seq %d: over max_position_embeddings %d of %s/config.json: the model was not trained for sequences "
               "this long, so the loss measures how it extrapolates", T, info.max_pos, info.dir);

    // The data: opened for the smallest window (B = T = 1) so that data_open validates the
    // file (header, size, every token < vocab) without asking for a training split of B·T+1
    // tokens plus as many held out; the windows are counted here, against T+1.
    config_t dc = ec;
    dc.B = 1;
    dc.T = 1;
    data_t *data = NULL;
    if ((rc = data_open(&data, &dc, err, sizeof err)) != 0) fail(rc, err);
    const size_t ntok = data_count(data);
    size_t nuse = cfg->eval_tokens && cfg->eval_tokens < ntok ? (size_t)cfg->eval_tokens : ntok;
    const size_t W = nuse / ((size_t)T + 1);
    if (W == 0) {
        if (nuse < ntok)
            usage_error("--eval-tokens %zu: fewer than one window of T+1 = %d tokens (--seq %d; raise --eval-tokens or "
                        "lower --seq)", nuse, T + 1, T);
        usage_error("--data %s: %zu tokens, fewer than one window of T+1 = %d tokens (--seq %d; give a longer file or "
                    "a lower --seq)", cfg->data, nuse, T + 1, T);
    }

    // ---- the resolved setup, first
    if (hf)
        fprintf(out, "tiertrain eval: weights from %s (a Hugging Face Llama folder)\n", info.dir);
    else
        fprintf(out, "tiertrain eval: checkpoint %s (step %d, params_hash %s; trained on %s)\n", info.dir, info.step,
                info.params_hash, info.data[0] ? info.data : "?");
    char rope[160];
    model_rope_text(ec.rope_theta, &ec.rope_scaling, rope, sizeof rope);
    fprintf(out, "  model: L %d, C %d, heads %d (kv %d, size %d), ffn %d, vocab %d, %s, %s, norm-eps %g%s%s\n",
            ec.L, ec.C, ec.NH, ec.NKV, ec.NH ? ec.C / ec.NH : 0, ec.F, ec.V, ec.tie ? "tied" : "untied", rope,
            ec.norm_eps, hf ? "" : "; model.safetensors ", hf ? "" : info.model_bf16 ? "bf16" : "fp32");
    fprintf(out, "  data: %s (%s, %zu tokens): %s %zu -> %zu window%s of T+1 = %d (%zu tokens left over)\n",
            cfg->data, data_kind(data), ntok, nuse == ntok ? "all" : "the first", nuse, W, W == 1 ? "" : "s", T + 1,
            nuse - W * ((size_t)T + 1));
    fprintf(out, "  run: seq %d (%s), precision %s (%s), batch 1, device %s, threads ", T,
            cfg->seq_given ? "--seq" : hf ? "the folder's max_position_embeddings, at most 1024" : "the checkpoint's",
            prec_name(ec.precision), cfg->precision_given ? "--precision" : hf ? "the default" : "the checkpoint's",
            ec.device == DEVICE_CPU ? "cpu" : ec.device == DEVICE_CUDA ? "cuda" : "auto");
    if (ec.threads) fprintf(out, "%d\n", ec.threads);
    else fprintf(out, "all cores\n");
    fflush(out);

    trainer_t *tr = NULL;
    if ((rc = trainer_init(&tr, &ec, err, sizeof err)) != 0) fail_with(rc, "%s", err);
    if (hf) rc = hf_load(tr, info.dir, out, err, sizeof err);
    else rc = checkpoint_load(tr, NULL, &info, 1, err, sizeof err);
    if (rc != 0) fail(rc, err);
    trainer_info_t ti;
    trainer_info(tr, &ti);
    fprintf(out, "  loaded: %.2fM parameters, backend %s (%d thread%s)\n", trainer_model(tr)->num_params / 1e6,
            ti.backend, ti.threads, ti.threads == 1 ? "" : "s");
    fflush(out);

    // ---- one forward per window; the mean over windows of each window's mean loss. Every
    // window has exactly T targets, so this is the mean over all W·T predicted tokens.
    int *inputs = mallocCheck((size_t)T * sizeof(int));  // (1, T)
    int *targets = mallocCheck((size_t)T * sizeof(int)); // (1, T)
    double sum = 0, t0 = now_ms();
    progress_t pg;
    progress_begin(&pg, "evaluating (windows)", W, 0);
    for (size_t w = 0; w < W; w++) {
        data_window(data, w * ((size_t)T + 1), (size_t)T, inputs, targets);
        trainer_begin_eval(tr, 1);
        double l = trainer_forward(tr, inputs, targets);
        if (trainer_fault(tr)) runtime_error("eval window %zu: %s", w, trainer_fault(tr));
        sum += l;
        progress_add(&pg, 1);
    }
    progress_end(&pg);
    double ms = now_ms() - t0;
    double loss = sum / (double)W;
    if (!isfinite(loss)) runtime_error("eval: the loss is %g (the checkpoint's weights give non-finite logits)", loss);
    size_t ntarget = W * (size_t)T;
    fprintf(out, "eval: loss %.6f (perplexity %.3f), the mean over %zu window%s x %d = %zu predicted tokens (every "
                 "window predicts T, so also the mean of the window means); %.1f s, %.0f tok/s\n",
            loss, exp(loss), W, W == 1 ? "" : "s", T, ntarget, ms / 1e3, ms > 0 ? (double)ntarget / (ms / 1e3) : 0.0);
    // %.17g: the double round-trips, so two evaluations can be compared exactly.
    fprintf(out, "{\"event\":\"eval\",\"loss\":%.17g,\"tokens\":%zu,\"windows\":%zu}\n", loss, ntarget, W);
    fflush(out);
    free(inputs);
    free(targets);
    trainer_free(tr);
    data_free(data);
    return 0;
}
