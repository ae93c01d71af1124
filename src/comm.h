// comm.h — collectives over ranks (DESIGN §7): the world this process is one rank of, and
// the few collectives the step and the faces use.
//
// A process started by a launcher (mpirun, srun with PMI or PMIx: OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK in its environment) is one rank of an MPI world; any other process
// is the only rank of a world of one, and MPI is never initialised (every collective is then
// a local copy or nothing). Host buffers go through MPI (Open MPI). The CUDA backend's
// device buffers go through NCCL (comm_nccl.c, the comm_dev_* calls), bootstrapped by
// broadcasting rank 0's ncclUniqueId over MPI, queued on the backend's compute stream.
//
// Pieces: the fixed split of an n-element buffer among the ranks (comm_piece): rank r's piece
// is elements [lo, lo + cnt), pieces of ceil(n / size) rounded up to COMM_PIECE_ALIGN
// elements (16 KiB of FP32, 8 KiB of BF16: whole 4 KiB pages, and whole blocks of the
// gradient norm, gradnorm.h), the last ones shorter or empty. The ZeRO-3 partition of every
// shard's states (tier.h), the gradient fold (step.c) and the bench use it.
//
// Threads: MPI is initialised with MPI_THREAD_MULTIPLE when the library offers it (else
// FUNNELED). The compute thread uses comm_world; tier.c's gather worker uses comm_second (the
// same world, another communicator); each calls its collectives in the same order on every
// rank (the step's use order is static).
// Errors: every call returns 0 or -errno with one line in err (MPI's own message); MPI's
// handler is MPI_ERRORS_RETURN, so nothing here aborts or exits.
// Who calls it: main.c (init, finalize), train.c (rank 0's output, the start-up checks, the
// data each rank takes, agreement on errors), trainer.c and step.c (losses, gradient folds),
// bench_comm.c.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct comm comm_t;

// Joins the launcher's world (MPI_Init_thread) when there is one; otherwise a world of one.
// Returns 0, or -errno with one line (MPI failed to start).
int comm_init(int *argc, char ***argv, char *err, size_t errlen);
// After a run that ended well: MPI_Finalize (a world of one: nothing). Not on error paths:
// a rank leaving with an error exits without it, and the launcher ends the others.
void comm_finalize(void);
// The world (a world of one before comm_init).
comm_t *comm_world(void);
// A second handle on the same world, for one worker thread's collectives while the compute
// thread uses comm_world (their orders pair up separately); NULL where MPI does not offer
// MPI_THREAD_MULTIPLE, or without MPI.
comm_t *comm_second(void);

int comm_rank(const comm_t *c);
int comm_size(const comm_t *c);
int comm_local_rank(const comm_t *c); // among the ranks on this node
int comm_local_size(const comm_t *c);
int comm_is_mpi(const comm_t *c);      // started by a launcher (MPI initialised), even at size 1

#define COMM_PIECE_ALIGN 4096
// Rank r's piece of an n-element buffer: [*lo, *lo + *cnt).
void comm_piece(size_t n, int size, int r, size_t *lo, size_t *cnt);

// Each rank's mine (bytes each) gathered into all (size × bytes), in rank order.
int comm_allgather(comm_t *c, const void *mine, void *all, size_t bytes, char *err, size_t errlen);
// Buffer buf of n elements of elem bytes: each rank's piece of its own buf to every rank, in
// place.
int comm_allgather_pieces(comm_t *c, void *buf, size_t n, size_t elem, char *err, size_t errlen);
// Rank i's counts[i] bytes (mine on this rank) into all at displs[i], every rank.
int comm_allgatherv(comm_t *c, const void *mine, void *all, const size_t *counts, const size_t *displs, char *err,
                    size_t errlen);
// Piece j of send (n elements) to rank j; recv receives this rank's piece of every rank's
// send, rank i's at recv + i × cnt (cnt: this rank's piece length): recv holds size × cnt.
int comm_alltoall_pieces(comm_t *c, const float *send, float *recv, size_t n, char *err, size_t errlen);
// root's bytes into every rank's buf.
int comm_bcast(comm_t *c, void *buf, size_t bytes, int root, char *err, size_t errlen);
// Rank 0's rc on every rank (so that every rank stops at the same point of a load rank 0 reads
// for all); on another rank a failure's message is "rank 0 could not read WHAT". A failed
// broadcast is every rank's error.
int comm_bcast_rc(comm_t *c, int rc, const char *what, char *err, size_t errlen);
// The largest of every rank's value.
int comm_max_int(comm_t *c, int mine, int *max, char *err, size_t errlen);
int comm_barrier(comm_t *c, char *err, size_t errlen);

// One failure agreed on: every rank gives its rc and message (rc 0: none); every rank gets
// the first failing rank's rc and message, prefixed "rank R: " in a world of more than one
// (rank order). Returns that rc (0: every rank succeeded). When the collective itself fails
// the result is its error.
int comm_agree(comm_t *c, int rc, char *msg, size_t msglen);

// ---------------------------------------------------------------- the device engine (NCCL)

// Starts NCCL over the world on this rank's GPU (device: its CUDA ordinal), once. A build
// without NCCL (TT_HAVE_NCCL unset) answers -ENODEV with the fix. Returns 0 or -errno with one line.
int comm_dev_init(comm_t *c, int device, char *err, size_t errlen);
// comm_allgather_pieces and comm_alltoall_pieces on device buffers, queued on stream (a
// cudaStream_t: the backend's compute stream, in order with the ops) and returning at once;
// for a world of more than one rank (the step folds locally alone).
int comm_dev_allgather_pieces(comm_t *c, void *buf, size_t n, size_t elem, void *stream, char *err, size_t errlen);
int comm_dev_alltoall_pieces(comm_t *c, const float *send, float *recv, size_t n, void *stream, char *err,
                             size_t errlen);
// NCCL's end (comm_finalize calls it).
void comm_dev_free(void);
