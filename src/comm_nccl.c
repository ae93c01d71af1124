// comm_nccl.c — see comm.h: the device engine. NCCL over the same world as MPI: rank 0's
// ncclUniqueId is broadcast over MPI (comm_bcast), and every rank joins with ncclCommInitRank
// on its own GPU. Pieces of unequal length (comm_piece) go as grouped point-to-point calls:
// an all-gather is one ncclBroadcast per rank (its piece, in place), an all-to-all one
// ncclSend and one ncclRecv per rank; both queued on the caller's stream. Built only with
// NCCL (TT_HAVE_NCCL, CMake finds it beside the CUDA toolkit); without it every call answers
// -ENODEV. Nothing here has run on a GPU yet.
#include "comm.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef TT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

static ncclComm_t nccl_;   // the world's communicator, made once by comm_dev_init
static int nccl_ready_;

static int nccl_error(ncclResult_t r, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "NCCL %s failed: %s", what, ncclGetErrorString(r));
    return -EIO;
}

#define NCCL_TRY(call, what)                                                                                   \
    do {                                                                                                       \
        ncclResult_t r_ = (call);                                                                              \
        if (r_ != ncclSuccess) return nccl_error(r_, (what), err, errlen);                                     \
    } while (0)

int comm_dev_init(comm_t *c, int device, char *err, size_t errlen) {
    if (nccl_ready_ || comm_size(c) == 1) return 0;
    cudaError_t ce = cudaSetDevice(device);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "NCCL: cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
        return -EIO;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (comm_rank(c) == 0) NCCL_TRY(ncclGetUniqueId(&id), "ncclGetUniqueId");
    int rc = comm_bcast(c, &id, sizeof id, 0, err, errlen);
    if (rc != 0) return rc;
    NCCL_TRY(ncclCommInitRank(&nccl_, comm_size(c), id, comm_rank(c)), "ncclCommInitRank");
    nccl_ready_ = 1;
    return 0;
}

void comm_dev_free(void) {
    if (!nccl_ready_) return;
    ncclCommDestroy(nccl_);
    nccl_ready_ = 0;
}

// The grouped calls' start: NCCL must have been started.
static int group_start(char *err, size_t errlen) {
    if (!nccl_ready_) {
        snprintf(err, errlen, "NCCL: not started (comm_dev_init)");
        return -EINVAL;
    }
    NCCL_TRY(ncclGroupStart(), "ncclGroupStart");
    return 0;
}

// The group's end; a call that failed inside it (r) ends it all the same.
static int group_end(ncclResult_t r, const char *what, char *err, size_t errlen) {
    ncclResult_t e = ncclGroupEnd();
    if (r != ncclSuccess) return nccl_error(r, what, err, errlen);
    if (e != ncclSuccess) return nccl_error(e, "ncclGroupEnd", err, errlen);
    return 0;
}

int comm_dev_allgather_pieces(comm_t *c, void *buf, size_t n, size_t elem, void *stream, char *err, size_t errlen) {
    const int N = comm_size(c);
    if (N == 1) return 0;
    int rc = group_start(err, errlen);
    if (rc != 0) return rc;
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < N && r == ncclSuccess; j++) {
        size_t lo, cnt;
        comm_piece(n, N, j, &lo, &cnt);
        char *at = (char *)buf + lo * elem;
        r = ncclBroadcast(at, at, cnt * elem, ncclInt8, j, nccl_, (cudaStream_t)stream);
    }
    return group_end(r, "ncclBroadcast", err, errlen);
}

int comm_dev_alltoall_pieces(comm_t *c, const float *send, float *recv, size_t n, void *stream, char *err,
                             size_t errlen) {
    const int N = comm_size(c), me = comm_rank(c);
    size_t mlo, mine;
    comm_piece(n, N, me, &mlo, &mine);
    int rc = group_start(err, errlen);
    if (rc != 0) return rc;
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < N && r == ncclSuccess; j++) {
        size_t lo, cnt;
        comm_piece(n, N, j, &lo, &cnt);
        r = ncclSend(send + lo, cnt, ncclFloat, j, nccl_, (cudaStream_t)stream);
        if (r == ncclSuccess) r = ncclRecv(recv + (size_t)j * mine, mine, ncclFloat, j, nccl_, (cudaStream_t)stream);
    }
    return group_end(r, "ncclSend/ncclRecv", err, errlen);
}

#else // no NCCL in this build

static int no_nccl(char *err, size_t errlen) {
    snprintf(err, errlen, "this build has no NCCL, which ranks on the CUDA backend need (rebuild where the CUDA "
             "toolkit has nccl.h and libnccl, or run the ranks with --device cpu)");
    return -ENODEV;
}

int comm_dev_init(comm_t *c, int device, char *err, size_t errlen) {
    (void)device;
    return comm_size(c) == 1 ? 0 : no_nccl(err, errlen);
}

void comm_dev_free(void) {}

int comm_dev_allgather_pieces(comm_t *c, void *buf, size_t n, size_t elem, void *stream, char *err, size_t errlen) {
    (void)buf; (void)n; (void)elem; (void)stream;
    return comm_size(c) == 1 ? 0 : no_nccl(err, errlen);
}

int comm_dev_alltoall_pieces(comm_t *c, const float *send, float *recv, size_t n, void *stream, char *err,
                             size_t errlen) {
    (void)c; (void)send; (void)recv; (void)n; (void)stream;
    return no_nccl(err, errlen);
}
#endif
