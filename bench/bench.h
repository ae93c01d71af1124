// bench.h — `tiertrain bench NAME`: each prints a table for people and, as its last line,
// one JSON object {"bench": NAME, ...}. Returns the process exit code.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "hostmem.h"
#include "io.h"
#include "plan.h"
#include "trainer.h"

int bench_gemm(const config_t *cfg); // bench/bench_gemm.c
// bench gemm when the run resolves to the CUDA backend: the backend's matmul ops against bare
// cublasLtMatmul (bench/bench_gemm_cuda.c, in builds with CUDA only; bench_gemm calls it).
int bench_gemm_cuda(const config_t *cfg);
int bench_io(const config_t *cfg);   // bench/bench_io.c
// For the benchmarks that time NVMe (bench/bench_io.c): bytes of random data, so that no
// layer under the store can compress them; and the store they run on, size bytes in cfg's
// NVMe folder in block requests qd deep, with hm's regions registered as a run registers its
// pool (0 or -errno with one line in err).
void bench_fill_random(char *buf, uint64_t bytes);
int bench_nvme_open(const config_t *cfg, hostmem_t *hm, uint64_t size, uint64_t block, int qd, nvme_store_t **s,
                    char *err, size_t errlen);
int bench_adam(const config_t *cfg); // bench/bench_adam.c
int bench_calibrate(const config_t *cfg); // bench/bench_calibrate.c: measures the rates and writes the profile
// calibrate's compute rates, measured now (its quick repeats, a backend of its own from cfg):
// the matmuls' FLOP/s on the operands cfg's precision gives them (BF16 values, or FP32 in
// fp32 mode: the plan's gemm_fp32_flops), the attention op's FLOP/s and the elementwise ops'
// bytes/s (calibrate's attn_flops, elem_Bps): bench overlap's floor at the rates of the minutes
// it runs in. Returns 0 or -errno with one line in err.
typedef struct {
    double gemm_flops, attn_flops, elem_Bps;
} bench_rates_t;
int bench_compute_rates(const config_t *cfg, bench_rates_t *now, char *err, size_t errlen);
// One sequential write pass, then one read pass, over a size-byte file in cfg's NVMe folder
// (--io-block requests, --nvme-qd deep, registered buffers: calibrate's way), the rates in
// bytes/s into *rd and *wr; with mixed (NULL: none), then one pass that reads the even blocks
// and writes the odd ones in one queue, as a training step does both at once: its reads' and
// its writes' bytes/s into mixed[0] and mixed[1]. The file is gone after. bench capacity
// measures the disk at a run's own scale with it. Returns 0 or -errno with one line in err.
int bench_nvme_rates(const config_t *cfg, uint64_t size, double *rd, double *wr, double mixed[2], char *err,
                     size_t errlen);

// The median of x[0..n) (n ≥ 1), sorting x in place, least first (bench/bench_run.c).
double bench_median(double *x, int n);

// ---- whole training steps (bench/bench_run.c), for overlap and capacity
typedef struct {
    double step_ms;          // median over the steps after the first
    double last_ms;          // the last step
    double init_ms;          // trainer_init: allocation, first touch, initial weights (and NVMe writes)
    double first_loss, last_loss;
    uint64_t hash;           // params_hash after the steps
    size_t num_params;
    trainer_info_t info;     // what the tiers held and moved (report.h prints the same)
} bench_run_t;
// Builds the trainer for cfg and runs `steps` steps on cfg's data. Returns 0 or -errno with
// one line in err.
int bench_run_steps(const config_t *cfg, int steps, bench_run_t *r, char *err, size_t errlen);
// The same, calling hook->on_init once the trainer is built and hook->on_step after each
// step (either may be NULL).
typedef struct {
    void (*on_init)(trainer_t *tr, void *arg);
    void (*on_step)(trainer_t *tr, int step, void *arg);
    void *arg;
} bench_hook_t;
int bench_run_steps_hooked(const config_t *cfg, int steps, const bench_hook_t *hook, bench_run_t *r, char *err,
                           size_t errlen);
// The plan of cfg's run at rates (malloc'd: the caller frees it), --recompute auto decided on it
// as train decides (cfg's kept blocks set; its line in why, "" when nothing to say); a
// placement or save that does not fit is refused as train refuses it: exit 2, "who: reason".
plan_t *bench_plan(config_t *cfg, const model_t *m, const profile_t *rates, char *why, size_t wlen, const char *who);
int bench_overlap(const config_t *cfg);  // bench/bench_overlap.c
int bench_capacity(const config_t *cfg); // bench/bench_capacity.c
int bench_train(const config_t *cfg);    // bench/bench_train.c
int bench_comm(const config_t *cfg);     // bench/bench_comm.c: the ranks' collectives (under mpirun)
int bench_checkpoint(const config_t *cfg); // bench/bench_checkpoint.c: a save and a load against the disk and the hash
// The gradient fold's rate: bytes a rank sends per second over 16 MiB (a collective; 0 with one
// rank). Returns 0 or -errno with one line. bench calibrate stores it as the profile's comm_Bps.
int bench_comm_fold_rate(double *Bps, char *err, size_t errlen);
