// profile.h — the machine's measured rates, which the plan divides a step's work by to
// predict its floor (DESIGN §4, §10). `tiertrain bench calibrate` measures them and writes
// the profile (JSON) to --profile, default $XDG_CACHE_HOME/tiertrain/profile.json or
// ~/.cache/tiertrain/profile.json; plan and train read it. Without a profile, conservative
// defaults stand in and every report says so.
// Who calls it: plan.c, train.c, bench/bench_calibrate.c, bench/bench_overlap.c.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"

typedef struct {
    double gemm_flops;        // FLOP/s of the step's matmuls on the compute backend
    double h2d_Bps, d2h_Bps;  // host → device, device → host copy rates (bytes/s)
    double nvme_read_Bps;     // NVMe tier read and write rates (bytes/s), through the io engine
    double nvme_write_Bps;
    double adam_params_per_s; // AdamW update rate of the optimizer (parameters/s)
    // The step's other compute, measured through the backend's own ops by bench calibrate
    // (0: never measured; the plan then counts fp32 mode's matmuls and attention at gemm_flops and
// no elementwise time):
    double gemm_fp32_flops;   // FLOP/s of the matmuls on FP32 operands (--precision fp32: on a CPU with
                              // AMX-BF16, the FMA kernels, not the tiles gemm_flops measures)
    double attn_flops;        // FLOP/s of the attention op, forward and backward (plan.c's FLOP count)
    double elem_Bps;          // bytes/s that one block's elementwise ops (RMSNorm, RoPE, residual adds,
                              // SwiGLU) read and write, as plan_block_elem_words counts them
    double comm_Bps;          // ranks: bytes a rank sends per second in the gradient fold (all-to-all +
                              // all-gather), measured by bench calibrate under a launcher; 0: never measured
    uint64_t nvme_bytes;      // the size of the file the NVMe rates were measured over; 0: not recorded
    char backend[16];         // "cpu" or "cuda": the backend it was measured on
    int threads;              // compute threads it was measured with
    char source[4200];        // the file it came from, or "defaults"
    int measured;             // 1 when loaded from a file, 0 for the defaults
} profile_t;

// Conservative rates for when no profile exists (a slow 2-core machine, a slow disk).
void profile_defaults(profile_t *p);
// The profile path for cfg, written into buf and returned: --profile; else
// $XDG_CACHE_HOME/tiertrain/profile.json (when it is set and absolute, as the XDG spec
// asks); else $HOME/.cache/tiertrain/profile.json; else ./tiertrain-profile.json. When the
// path does not fit in len, buf holds "" (never a cut path): profile_load and profile_save
// then fail with -ENAMETOOLONG and a line asking for --profile.
const char *profile_path(const config_t *cfg, char *buf, size_t len);
// Loads the profile at path. Returns 0; -ENOENT when there is none (p holds the defaults,
// no message); another -errno with one line in err when the file is unreadable or malformed
// (p holds the defaults: callers say so and go on, or stop, as fits).
// The file is one JSON object (read with json.h): "version": 1, the six rates under the
// field names above ("gemm_flops", "h2d_Bps", ...; each within the range any real machine is
// inside: FLOP/s 1e6 to 1e17, B/s 1e6 to 1e14, AdamW params/s 1e4 to 1e17), and
// optionally "gemm_fp32_flops", "attn_flops", "elem_Bps" and "comm_Bps" (rates as above; profiles written
// before them have none), "backend" (a string), "threads" (an integer ≥ 0), "nvme_bytes" (an
// integer ≥ 0: the size of the file NVMe was measured over; profiles written before it have
// none) and "measured_at" (an ISO 8601 UTC date, a string); other keys are ignored. Anything
// else is -EINVAL, e.g.
//   profile /p.json: key 'h2d_Bps' at byte 40: 0 is not a rate in B/s (accepted: 1e+06 to
//   1e+14) (run tiertrain bench calibrate to remake it)      <- one line, without "tiertrain: "
int profile_load(profile_t *p, const char *path, char *err, size_t errlen);
// Writes p to path atomically (temporary file in the same folder, fsync, rename, fsync of
// the folder), creating missing parent folders (mode 0700, as XDG asks of cache folders).
// Rates are written with 17 significant digits, so profile_load gives back the same bits;
// measured_at is the time of the save. Refuses (-EINVAL) a rate load would refuse (an
// optional one only when measured: > 0).
// Returns 0 or -errno with one line in err.
int profile_save(const profile_t *p, const char *path, char *err, size_t errlen);
// Whether path can take a profile (before any measuring): 0, or -EISDIR, -EINVAL or -ENOTDIR
// with one line in err when it is a folder, not a regular file, or below a file. A missing
// file or folder is fine: profile_save creates them.
int profile_writable(const char *path, char *err, size_t errlen);
