// plan.h — what a configuration needs: bytes of each state, where they must fit, compute per
// step, and whether this machine can run it. `tiertrain plan` prints it; `train` runs the
// same check before allocating anything and exits 2 when it fails.
// Placements follow --params/--grads/--optimizer (the same rules as trainer_init); per-link
// traffic and the predicted floor from a calibration profile are still to come.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "config.h"
#include "model.h"

typedef struct {
    uint64_t params_bytes;   // compute copy (BF16, or FP32 in fp32 mode), padded shards
    uint64_t grads_bytes;    // FP32 gradients
    uint64_t optim_bytes;    // FP32 master + m + v
    uint64_t acts_bytes;     // checkpoints, one block's recompute, head, scratch
    uint64_t device_bytes;   // what the device arena must hold
    uint64_t host_bytes;     // what the host must hold (homes and staging)
    uint64_t nvme_bytes;     // what the NVMe store must hold
    uint64_t ram_needed;     // CPU backend: device arena and host are the same RAM, counted once
    uint64_t mem_available;  // /proc/meminfo MemAvailable
    double flops_per_step;   // matmul FLOPs incl. the recompute, plus attention
    int feasible;
    char reason[512];        // why not, and the flag that would fix it
} plan_t;

void plan_compute(const config_t *cfg, const model_t *m, plan_t *p);
// --offload auto: sets cfg's three homes to the first feasible placement, in order of the
// traffic it adds per step (all resident; params streamed from host; + gradients on host;
// optimizer on NVMe; …; everything but activations off the device), and fills p for it.
// Writes one line saying what it chose and why into why. Returns 1 when one fits, else 0
// (cfg then holds the last candidate and p its reason).
int plan_auto(config_t *cfg, const model_t *m, plan_t *p, char *why, size_t len);
void plan_print(const plan_t *p, const config_t *cfg, FILE *f);
