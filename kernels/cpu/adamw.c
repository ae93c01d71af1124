// adamw.c — the scalar AdamW update (kernels.h "AdamW"): the reference sequence of IEEE
// operations that every other path (AVX2, AVX-512, CUDA) reproduces bit for bit. The file
// is compiled with -ffp-contract=off, so the only fused multiply-adds are the explicit
// fmaf calls. Elementwise: parallel over elements, same bits for any thread count.
// Called by the optimizer driver for each FP32 shard as its gradient arrives.
#include "kernels.h"
#include <math.h>

#define ADAMW_PAR_MIN 16384

void adamw_update_scalar(float *master, float *m, float *v, uint16_t *p16, float *p32,
                         const float *g, size_t n, const adamw_params_t *hp) {
    const float lr = hp->lr, beta1 = hp->beta1, beta2 = hp->beta2, eps = hp->eps;
    const float wd = hp->wd, gs = hp->grad_scale, bc1 = hp->bc1, bc2 = hp->bc2;
    const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    float *gz = hp->consume ? (float *)g : NULL; // writable by the contract (kernels.h)
    #pragma omp parallel for schedule(static) if (n >= ADAMW_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        if (gz) gz[i] = 0.0f;
        float mi = fmaf(beta1, m[i], omb1 * gi);
        float vi = fmaf(beta2, v[i], (omb2 * gi) * gi);
        float mh = mi / bc1, vh = vi / bc2;
        float u = mh / (sqrtf(vh) + eps);
        float p = master[i] - lr * fmaf(wd, master[i], u);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        if (p16) p16[i] = bf16_from_f32(p);
        if (p32) p32[i] = p;
    }
}
