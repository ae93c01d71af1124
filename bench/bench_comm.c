// bench_comm.c — `tiertrain bench comm` (under mpirun -np N): the collectives the step uses,
// over message sizes, with nccl-tests' formulas (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md):
//   all-gather       algbw = S / t, busbw = algbw · (N−1)/N   (S: the gathered buffer's bytes)
//   reduce-scatter   the ordered one of comm.h: an all-to-all of pieces, then each piece's N
//                    contributions added in rank order; algbw = S / t, busbw = algbw · (N−1)/N
//   all-reduce       the step's gradient fold: that reduce-scatter, then an all-gather;
//                    algbw = S / t, busbw = algbw · 2(N−1)/N
// t is the slowest rank's time per operation (best of 5 batches of repetitions). A world of
// one times local copies (busbw 0). Host buffers, MPI (the CPU backend's engine).
// Table, then one JSON line {"bench":"comm",...}.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "comm.h"
#include "kernels.h"
#include "util.h"

enum { OP_ALLGATHER, OP_REDUCE_SCATTER, OP_ALLREDUCE, NOPS };
static const char *op_name[NOPS] = {"all-gather", "reduce-scatter", "all-reduce"};
static const char *op_key[NOPS] = {"allgather", "reduce_scatter", "allreduce"};

// One operation of op on n floats. Returns 0 or -errno (err).
static int one_op(comm_t *c, int op, float *g, float *f, float *recv, size_t n, char *err, size_t errlen) {
    const int N = comm_size(c), me = comm_rank(c);
    if (op == OP_ALLGATHER) return comm_allgather_pieces(c, g, n, sizeof(float), err, errlen);
    int rc = comm_alltoall_pieces(c, f, recv, n, err, errlen);
    if (rc != 0) return rc;
    size_t lo, cnt;
    comm_piece(n, N, me, &lo, &cnt);
    for (int r = 0; r < N; r++) add_inplace(g + lo, recv + (size_t)r * cnt, cnt, 0);
    return op == OP_ALLREDUCE ? comm_allgather_pieces(c, g, n, sizeof(float), err, errlen) : 0;
}

// The slowest rank's value.
static int slowest(comm_t *c, double mine, double *out, char *err, size_t errlen) {
    const int N = comm_size(c);
    double *all = mallocCheck((size_t)N * sizeof(double));
    int rc = comm_allgather(c, &mine, all, sizeof mine, err, errlen);
    *out = mine;
    for (int i = 0; rc == 0 && i < N; i++)
        if (all[i] > *out) *out = all[i];
    free(all);
    return rc;
}

int bench_comm_fold_rate(double *Bps, char *err, size_t errlen) {
    comm_t *c = comm_world();
    const int N = comm_size(c);
    *Bps = 0;
    if (N == 1) return 0;
    const size_t n = (size_t)4 << 20; // 16 MiB of FP32: a large block's gradients
    float *g = alignedAllocCheck(4096, n * sizeof(float)), *f = alignedAllocCheck(4096, n * sizeof(float)),
          *recv = alignedAllocCheck(4096, (n + (size_t)N * COMM_PIECE_ALIGN) * sizeof(float));
    memset(g, 0, n * sizeof(float));
    memset(f, 0, n * sizeof(float));
    double best = 1e300;
    int rc = 0;
    for (int k = 0; k < 4 && rc == 0; k++) { // the first warms up
        if ((rc = comm_barrier(c, err, errlen)) != 0) break;
        double t0 = now_ms(), worst = 0;
        if ((rc = one_op(c, OP_ALLREDUCE, g, f, recv, n, err, errlen)) != 0) break;
        if ((rc = slowest(c, now_ms() - t0, &worst, err, errlen)) != 0) break;
        if (k > 0 && worst < best) best = worst;
    }
    // the bytes each rank sends: (N−1)/N of the buffer in the all-to-all and in the all-gather
    if (rc == 0) *Bps = 2.0 * (N - 1) / N * (double)(n * sizeof(float)) / (best * 1e-3);
    free(g);
    free(f);
    free(recv);
    return rc;
}

int bench_comm(const config_t *cfg) {
    (void)cfg;
    comm_t *c = comm_world();
    const int N = comm_size(c);
    enum { NSIZES = 8 };
    const size_t max_n = (size_t)16 << 20; // 64 MiB of FP32
    float *g = alignedAllocCheck(4096, max_n * sizeof(float)), *f = alignedAllocCheck(4096, max_n * sizeof(float)),
          *recv = alignedAllocCheck(4096, (max_n + (size_t)N * COMM_PIECE_ALIGN) * sizeof(float));
    memset(recv, 0, (max_n + (size_t)N * COMM_PIECE_ALIGN) * sizeof(float));
    for (size_t i = 0; i < max_n; i++) { // touched once, before any timing
        f[i] = (float)(i % 977) * 1e-3f;
        g[i] = 0;
    }
    printf("bench comm: %d rank%s (%s), %d on this node; host buffers through MPI; best of 5 batches, the slowest "
           "rank's time\n", N, N == 1 ? "" : "s", comm_is_mpi(c) ? "MPI" : "no launcher: local copies", comm_local_size(c));
    printf("%12s  %-15s %10s %12s %12s\n", "size", "op", "us", "algbw GB/s", "busbw GB/s");
    double busbw[NOPS][NSIZES], best_bus[NOPS] = {0};
    size_t sizes[NSIZES];
    char err[512], a[32];
    for (int si = 0; si < NSIZES; si++) {
        const size_t n = ((size_t)1024 << (2 * si)) < max_n ? (size_t)1024 << (2 * si) : max_n; // 4 KiB .. 64 MiB
        sizes[si] = n * sizeof(float);
        for (int op = 0; op < NOPS; op++) {
            const int reps = n <= ((size_t)1 << 16) ? 50 : n <= ((size_t)1 << 20) ? 10 : 3;
            double best = 1e300;
            for (int batch = -1; batch < 5; batch++) { // batch -1 warms up
                if (comm_barrier(c, err, sizeof err) != 0) runtime_error("bench comm: %s", err);
                double t0 = now_ms();
                for (int k = 0; k < reps; k++)
                    if (one_op(c, op, g, f, recv, n, err, sizeof err) != 0) runtime_error("bench comm: %s", err);
                double t = (now_ms() - t0) / reps, worst;
                if (slowest(c, t, &worst, err, sizeof err) != 0) runtime_error("bench comm: %s", err);
                if (batch >= 0 && worst < best) best = worst;
            }
            const double alg = (double)sizes[si] / (best * 1e-3) / 1e9;
            const double factor = op == OP_ALLREDUCE ? 2.0 * (N - 1) / N : (double)(N - 1) / N;
            busbw[op][si] = alg * factor;
            if (busbw[op][si] > best_bus[op]) best_bus[op] = busbw[op][si];
            printf("%12s  %-15s %10.1f %12.3f %12.3f\n", format_bytes(a, sizeof a, sizes[si]), op_name[op], best * 1e3,
                   alg, busbw[op][si]);
        }
    }
    printf("peak busbw: all-gather %.2f GB/s, reduce-scatter %.2f GB/s, all-reduce %.2f GB/s\n", best_bus[0],
           best_bus[1], best_bus[2]);
    printf("{\"bench\":\"comm\",\"ranks\":%d,\"local_ranks\":%d,\"engine\":\"%s\",\"sizes\":[", N, comm_local_size(c),
           comm_is_mpi(c) ? "mpi" : "local");
    for (int si = 0; si < NSIZES; si++) printf("%s%zu", si ? "," : "", sizes[si]);
    printf("]");
    for (int op = 0; op < NOPS; op++) {
        printf(",\"%s_busbw_GBps\":[", op_key[op]);
        for (int si = 0; si < NSIZES; si++) printf("%s%.4f", si ? "," : "", busbw[op][si]);
        printf("],\"%s_peak_busbw_GBps\":%.4f", op_key[op], best_bus[op]);
    }
    printf("}\n");
    free(g);
    free(f);
    free(recv);
    return 0;
}
