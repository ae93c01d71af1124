// bench_checkpoint.c — `tiertrain bench checkpoint`: how fast a checkpoint saves and loads,
// against what bounds it. One model (train's flags: its shape and tiers, --save-dtype) takes
// one step, then saves a checkpoint into a fresh folder under --save (default: the first
// --nvme-path folder, else $TMPDIR or /tmp) and loads it back into the same trainer (which
// checks every tensor's CRC and the params_hash), timing each; the folder is removed after.
// Then the same folder's disk is measured at the checkpoint's own size (bench_nvme_rates:
// sequential write, read, and reads and writes at once) and the params_hash's FNV-1a rate on
// this CPU. The floor of each direction is the slower of
//   the disk: the files' bytes at its sequential rate; with the optimizer on NVMe the states'
//     bytes cross the same kind of disk the other way, so both at the rates of the mixed pass;
//   the hash: the FP32 masters' bytes at FNV-1a's rate (a chain of one multiply per byte,
//     which no thread count shortens).
// A table, then one JSON line {"bench":"checkpoint",...}.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "bench.h"
#include "checkpoint.h"
#include "ckpt_dir.h"
#include "backend.h"
#include "model.h"
#include "train.h" // uses: train_load_profile
#include "util.h"


typedef struct {
    char dir[TT_PATH_MAX];       // the --save directory the bench made
    double save_ms, load_ms;
    uint64_t save_hash;
    uint64_t file_bytes;         // model.safetensors + optimizer.safetensors
    int rc;
    char err[1024];
} ckpt_bench_t;

static uint64_t file_size(const char *dir, const char *name) {
    char p[TT_PATH_MAX + 128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

// After step 1: the save, then the load of what it wrote (the load verifies the CRCs and
// that the masters hash to the save's params_hash).
static void on_step(trainer_t *tr, int step, void *arg) {
    ckpt_bench_t *b = arg;
    char where[TT_PATH_MAX + 64];
    if ((b->rc = trainer_optimizer_wait(tr, b->err, sizeof b->err)) != 0) return; // the step's update: not the save's
    double t0 = now_ms();
    b->rc = checkpoint_save(tr, NULL, NULL, step, &b->save_hash, where, sizeof where, b->err, sizeof b->err);
    b->save_ms = now_ms() - t0;
    if (b->rc != 0) return;
    b->file_bytes = file_size(where, "model.safetensors") + file_size(where, "optimizer.safetensors");
    ckpt_info_t info;
    if ((b->rc = checkpoint_info(where, &info, b->err, sizeof b->err)) != 0) return;
    t0 = now_ms();
    b->rc = checkpoint_load(tr, NULL, &info, 0, b->err, sizeof b->err);
    b->load_ms = now_ms() - t0;
}

// FNV-1a's bytes per second over 64 MiB (the params_hash's rate on this CPU).
static double fnv_rate(void) {
    const size_t n = (size_t)64 << 20;
    char *buf = malloc(n);
    if (!buf) return 0;
    bench_fill_random(buf, n);
    fnv1a64(FNV64_INIT, buf, n); // first touch out of the timing
    double t0 = now_ms();
    volatile uint64_t h = fnv1a64(FNV64_INIT, buf, n);
    (void)h;
    double ms = now_ms() - t0;
    free(buf);
    return ms > 0 ? n / (ms / 1e3) : 0;
}

// The bench's --save directory: DIR/tt-bench-checkpoint-PID under --save, the first
// --nvme-path folder, $TMPDIR or /tmp. 0, or -1 when the path does not fit.
static int bench_dir(const config_t *cfg, char *out, size_t len) {
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    int n;
    if (cfg->save_dir[0]) n = snprintf(out, len, "%s/tt-bench-checkpoint-%d", cfg->save_dir, (int)getpid());
    else if (cfg->nvme_path[0])
        n = snprintf(out, len, "%.*s/tt-bench-checkpoint-%d", (int)strcspn(cfg->nvme_path, ","), cfg->nvme_path,
                     (int)getpid());
    else n = snprintf(out, len, "%s/tt-bench-checkpoint-%d", tmp, (int)getpid());
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int bench_checkpoint(const config_t *cfg_in) {
    config_t cfg = *cfg_in;
    cfg.command = CMD_TRAIN;
    cfg.eval_every = 0;
    cfg.save_every = 0;
    cfg.keep_last = 0;
    char err[1024];
    if (backend_resolve_config(&cfg, err, sizeof err) != 0) usage_error("bench checkpoint: %s", err);
    ckpt_bench_t b = {0};
    if (bench_dir(cfg_in, b.dir, sizeof b.dir) != 0)
        usage_error("bench checkpoint: the folder's path is too long (give a shorter --save)");
    { // a placement or a save that does not fit is refused before any work, as train refuses it
        config_t pc = cfg;
        snprintf(pc.save_dir, sizeof pc.save_dir, "%s", b.dir);
        profile_t prof;
        const profile_t *rates = train_load_profile(&pc, &prof);
        model_t pm;
        model_init(&pm, &pc);
        char why[512];
        free(bench_plan(&pc, &pm, rates, why, sizeof why, "bench checkpoint"));
        model_free(&pm);
    }
    // --save DIR may be new (its parent exists): then it goes again at the end
    const int made = cfg_in->save_dir[0] && mkdir(cfg_in->save_dir, 0755) == 0;
    if (mkdir(b.dir, 0755) != 0) {
        fprintf(stderr, "tiertrain: bench checkpoint: cannot create %s: %s (give --save a writable folder)\n", b.dir,
                strerror(errno));
        return 1;
    }
    snprintf(cfg.save_dir, sizeof cfg.save_dir, "%s", b.dir);
    model_t m;
    model_init(&m, &cfg);
    const int on_disk = cfg.optim_tier == TIER_NVME;
    printf("model %s: %.2fM parameters, optimizer states %s, model file %s; checkpoint in %s\n", cfg.preset,
           m.num_params / 1e6, tier_kind_name(cfg.optim_tier), cfg.save_bf16 ? "bf16" : "fp32", b.dir);
    bench_hook_t hook = {.on_step = on_step, .arg = &b};
    bench_run_t run;
    int rc = bench_run_steps_hooked(&cfg, 1, &hook, &run, err, sizeof err);
    char step_folder[TT_PATH_MAX + 32], latest[TT_PATH_MAX + 32];
    snprintf(step_folder, sizeof step_folder, "%s/step-00000001", b.dir);
    snprintf(latest, sizeof latest, "%s/latest", b.dir);
    ckpt_remove_folder(step_folder);
    unlink(latest);
    if (rc == 0 && b.rc != 0) {
        rc = b.rc;
        snprintf(err, sizeof err, "%s", b.err);
    }
    if (rc != 0) {
        rmdir(b.dir);
        if (made) rmdir(cfg_in->save_dir);
        model_free(&m);
        fprintf(stderr, "tiertrain: bench checkpoint: %s\n", err);
        return 1;
    }
    // the disk under the folder, at the checkpoint's size; the hash's rate
    config_t disk = cfg;
    snprintf(disk.nvme_path, sizeof disk.nvme_path, "%s", b.dir);
    double rd = 0, wr = 0, mixed[2] = {0};
    rc = bench_nvme_rates(&disk, b.file_bytes, &rd, &wr, mixed, err, sizeof err);
    rmdir(b.dir);
    if (made) rmdir(cfg_in->save_dir);
    if (rc != 0) {
        model_free(&m);
        fprintf(stderr, "tiertrain: bench checkpoint: measuring the disk: %s\n", err);
        return 1;
    }
    const double fnv = fnv_rate();
    // bytes: the files; the states read from (save) or written to (load) their tier: master,
    // m, v, each once (the save's pass over the masters feeds both files)
    const double F = (double)b.file_bytes, masters = 4.0 * (double)m.numel_padded;
    const double S = masters * 3;
    double disk_save = F / wr, disk_load = F / rd;
    if (on_disk && mixed[0] > 0 && mixed[1] > 0) {
        disk_save = fmax(S / mixed[0], F / mixed[1]);
        disk_load = fmax(F / mixed[0], S / mixed[1]);
    } else if (on_disk) { // no mixed pass: one direction after the other
        disk_save = S / rd + F / wr;
        disk_load = F / rd + S / wr;
    }
    const double hash_s = fnv > 0 ? masters / fnv : 0;
    const double floor_save = fmax(disk_save, hash_s), floor_load = fmax(disk_load, hash_s);
    const double save_s = b.save_ms / 1e3, load_s = b.load_ms / 1e3;
    char a[32], c[32];
    printf("\n%-6s %12s %9s %9s %10s %-6s %8s\n", "what", "file bytes", "seconds", "GB/s", "floor s", "bound",
           "x floor");
    printf("%-6s %12s %9.2f %9.2f %10.2f %-6s %8.2f\n", "save", format_bytes(a, sizeof a, b.file_bytes), save_s,
           F / save_s / 1e9, floor_save, disk_save >= hash_s ? "disk" : "hash", save_s / floor_save);
    printf("%-6s %12s %9.2f %9.2f %10.2f %-6s %8.2f\n", "load", a, load_s, F / load_s / 1e9, floor_load,
           disk_load >= hash_s ? "disk" : "hash", load_s / floor_load);
    printf("\ndisk under %s, a %s file: write %.2f GB/s, read %.2f GB/s; reads and writes at once %.2f + %.2f GB/s\n",
           cfg_in->save_dir[0] ? cfg_in->save_dir : "the bench's folder", format_bytes(c, sizeof c, b.file_bytes),
           wr / 1e9, rd / 1e9, mixed[0] / 1e9, mixed[1] / 1e9);
    printf("params_hash (FNV-1a) %.2f GB/s over %s of FP32 masters: %.2f s; states %s%s\n", fnv / 1e9,
           format_bytes(c, sizeof c, (uint64_t)masters), hash_s, tier_kind_name(cfg.optim_tier),
           on_disk ? " (the save reads them as it writes the files, the load writes them as it reads: the mixed rates)"
                   : "");
    printf("{\"bench\":\"checkpoint\",\"params\":%zu,\"file_bytes\":%llu,\"optimizer\":\"%s\",\"save_s\":%.3f,"
           "\"load_s\":%.3f,\"save_GBps\":%.3f,\"load_GBps\":%.3f,\"save_floor_s\":%.3f,\"load_floor_s\":%.3f,"
           "\"disk_read_GBps\":%.3f,\"disk_write_GBps\":%.3f,\"disk_mixed_read_GBps\":%.3f,"
           "\"disk_mixed_write_GBps\":%.3f,\"hash_GBps\":%.3f,\"params_hash\":\"%016llx\"}\n",
           m.num_params, (unsigned long long)b.file_bytes, tier_kind_name(cfg.optim_tier), save_s, load_s,
           F / save_s / 1e9,
           F / load_s / 1e9, floor_save, floor_load, rd / 1e9, wr / 1e9, mixed[0] / 1e9, mixed[1] / 1e9, fnv / 1e9,
           (unsigned long long)b.save_hash);
    model_free(&m);
    return 0;
}
