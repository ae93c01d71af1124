// comm.c — see comm.h. The MPI engine (host buffers) and the world of one. A build without
// MPI (TT_HAVE_MPI unset: no libopenmpi-dev where it was built) has the world of one only, and
// a launcher's process is refused with the fix.
#include "comm.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Open MPI's mpirun, MPICH's hydra and srun --mpi=pmi2 (PMI), srun --mpi=pmix (PMIx).
static int launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

void comm_piece(size_t n, int size, int r, size_t *lo, size_t *cnt) {
    size_t per = (n + (size_t)size - 1) / (size_t)size;
    per = (per + COMM_PIECE_ALIGN - 1) / COMM_PIECE_ALIGN * COMM_PIECE_ALIGN;
    size_t a = per * (size_t)r, b = a + per;
    if (a > n) a = n;
    if (b > n) b = n;
    *lo = a;
    *cnt = b - a;
}

#ifdef TT_HAVE_MPI
#include <mpi.h>

struct comm {
    int rank, size, local_rank, local_size;
    int mpi;           // MPI is initialised (a launcher started us)
    int multiple;      // MPI_THREAD_MULTIPLE: another thread may use another communicator meanwhile
    MPI_Comm world;    // a duplicate of MPI_COMM_WORLD whose handler returns errors
    int *counts, *displs, *rcounts, *rdispls; // (size) each: the v-collectives' tables, made once
};

static comm_t world_ = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1};
static comm_t second_ = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1}; // comm_second

comm_t *comm_world(void) { return &world_; }
comm_t *comm_second(void) { return world_.multiple ? &second_ : NULL; }
int comm_rank(const comm_t *c) { return c->rank; }
int comm_size(const comm_t *c) { return c->size; }
int comm_local_rank(const comm_t *c) { return c->local_rank; }
int comm_local_size(const comm_t *c) { return c->local_size; }
int comm_is_mpi(const comm_t *c) { return c->mpi; }

static int mpi_error(int rc, const char *what, char *err, size_t errlen) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    MPI_Error_string(rc, s, &n);
    if (err) snprintf(err, errlen, "MPI %s failed: %s", what, s);
    return -EIO;
}

#define MPI_TRY(call, what)                                                                                    \
    do {                                                                                                       \
        int r_ = (call);                                                                                       \
        if (r_ != MPI_SUCCESS) return mpi_error(r_, (what), err, errlen);                                      \
    } while (0)

// c: a duplicate of from whose handler returns errors, its rank and size, and its own
// tables for the v-collectives (a communicator per thread: none shares them).
static int comm_open(comm_t *c, MPI_Comm from, char *err, size_t errlen) {
    MPI_TRY(MPI_Comm_dup(from, &c->world), "MPI_Comm_dup");
    MPI_TRY(MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_TRY(MPI_Comm_rank(c->world, &c->rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(c->world, &c->size), "MPI_Comm_size");
    size_t n = (size_t)c->size;
    c->counts = calloc(4 * n, sizeof(int));
    if (!c->counts) {
        snprintf(err, errlen, "out of memory for the communicator's tables");
        return -ENOMEM;
    }
    c->displs = c->counts + n;
    c->rcounts = c->counts + 2 * n;
    c->rdispls = c->counts + 3 * n;
    return 0;
}

int comm_init(int *argc, char ***argv, char *err, size_t errlen) {
    if (!launched() || world_.mpi) return 0;
    int provided = 0;
    MPI_TRY(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    world_.mpi = 1;
    if (provided < MPI_THREAD_FUNNELED) {
        snprintf(err, errlen, "MPI offers thread level %d, below MPI_THREAD_FUNNELED (use an Open MPI built with threads)",
                 provided);
        return -ENODEV;
    }
    int rc = comm_open(&world_, MPI_COMM_WORLD, err, errlen);
    if (rc != 0) return rc;
    MPI_Comm node;
    MPI_TRY(MPI_Comm_split_type(world_.world, MPI_COMM_TYPE_SHARED, world_.rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
    MPI_TRY(MPI_Comm_rank(node, &world_.local_rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(node, &world_.local_size), "MPI_Comm_size");
    MPI_Comm_free(&node);
    if (provided >= MPI_THREAD_MULTIPLE) { // the second world, for a worker thread's collectives
        second_ = world_;
        if ((rc = comm_open(&second_, world_.world, err, errlen)) != 0) return rc;
        world_.multiple = 1;
    }
    return 0;
}

void comm_finalize(void) {
    comm_dev_free();
    if (!world_.mpi) return;
    if (world_.multiple) {
        MPI_Comm_free(&second_.world);
        free(second_.counts);
        world_.multiple = 0;
    }
    MPI_Comm_free(&world_.world);
    MPI_Finalize();
    free(world_.counts);
    world_.counts = NULL;
    world_.mpi = 0;
}

// The pieces' counts and offsets as MPI's ints, in units of elem bytes.
static int piece_tables(comm_t *c, size_t n, size_t elem, char *err, size_t errlen) {
    if (n * elem > (size_t)INT_MAX) {
        snprintf(err, errlen, "a collective of %zu bytes is over MPI's int counts", n * elem);
        return -EOVERFLOW;
    }
    for (int j = 0; j < c->size; j++) {
        size_t lo, cnt;
        comm_piece(n, c->size, j, &lo, &cnt);
        c->counts[j] = (int)(cnt * elem);
        c->displs[j] = (int)(lo * elem);
    }
    return 0;
}

int comm_allgather(comm_t *c, const void *mine, void *all, size_t bytes, char *err, size_t errlen) {
    if (!c->mpi) {
        memmove(all, mine, bytes);
        return 0;
    }
    if (bytes > (size_t)INT_MAX) {
        snprintf(err, errlen, "an all-gather of %zu bytes is over MPI's int counts", bytes);
        return -EOVERFLOW;
    }
    MPI_TRY(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->world), "MPI_Allgather");
    return 0;
}

int comm_allgather_pieces(comm_t *c, void *buf, size_t n, size_t elem, char *err, size_t errlen) {
    if (!c->mpi || c->size == 1) return 0;
    int rc = piece_tables(c, n, elem, err, errlen);
    if (rc != 0) return rc;
    MPI_TRY(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c->counts, c->displs, MPI_BYTE, c->world),
            "MPI_Allgatherv");
    return 0;
}

int comm_allgatherv(comm_t *c, const void *mine, void *all, const size_t *counts, const size_t *displs, char *err,
                    size_t errlen) {
    if (!c->mpi) {
        memmove((char *)all + displs[0], mine, counts[0]);
        return 0;
    }
    for (int j = 0; j < c->size; j++) {
        if (counts[j] > (size_t)INT_MAX || displs[j] > (size_t)INT_MAX) {
            snprintf(err, errlen, "an all-gather of %zu bytes is over MPI's int counts", counts[j] + displs[j]);
            return -EOVERFLOW;
        }
        c->counts[j] = (int)counts[j];
        c->displs[j] = (int)displs[j];
    }
    MPI_TRY(MPI_Allgatherv(mine, c->counts[c->rank], MPI_BYTE, all, c->counts, c->displs, MPI_BYTE, c->world),
            "MPI_Allgatherv");
    return 0;
}

int comm_alltoall_pieces(comm_t *c, const float *send, float *recv, size_t n, char *err, size_t errlen) {
    if (!c->mpi || c->size == 1) {
        memmove(recv, send, n * sizeof(float));
        return 0;
    }
    int rc = piece_tables(c, n, sizeof(float), err, errlen);
    if (rc != 0) return rc;
    const int mine = c->counts[c->rank];
    for (int i = 0; i < c->size; i++) {
        c->rcounts[i] = mine;
        c->rdispls[i] = i * mine;
    }
    MPI_TRY(MPI_Alltoallv(send, c->counts, c->displs, MPI_BYTE, recv, c->rcounts, c->rdispls, MPI_BYTE, c->world),
            "MPI_Alltoallv");
    return 0;
}

int comm_bcast(comm_t *c, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    if (!c->mpi) return 0;
    if (bytes > (size_t)INT_MAX) {
        snprintf(err, errlen, "a broadcast of %zu bytes is over MPI's int counts", bytes);
        return -EOVERFLOW;
    }
    MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->world), "MPI_Bcast");
    return 0;
}

int comm_bcast_rc(comm_t *c, int rc, const char *what, char *err, size_t errlen) {
    char e2[512];
    if (comm_bcast(c, &rc, sizeof rc, 0, e2, sizeof e2) != 0) {
        snprintf(err, errlen, "%s", e2);
        return -EIO;
    }
    if (rc != 0 && c->rank != 0) snprintf(err, errlen, "rank 0 could not read %s", what);
    return rc;
}

int comm_max_int(comm_t *c, int mine, int *max, char *err, size_t errlen) {
    *max = mine;
    if (!c->mpi) return 0;
    MPI_TRY(MPI_Allreduce(&mine, max, 1, MPI_INT, MPI_MAX, c->world), "MPI_Allreduce");
    return 0;
}

int comm_barrier(comm_t *c, char *err, size_t errlen) {
    if (!c->mpi) return 0;
    MPI_TRY(MPI_Barrier(c->world), "MPI_Barrier");
    return 0;
}

int comm_agree(comm_t *c, int rc, char *msg, size_t msglen) {
    if (!c->mpi) return rc;
    enum { MSG = 1024 };
    int *rcs = c->rcounts; // (size): the tables are free between collectives
    int r = MPI_Allgather(&rc, 1, MPI_INT, rcs, 1, MPI_INT, c->world);
    if (r != MPI_SUCCESS) return mpi_error(r, "MPI_Allgather", msg, msglen);
    int first = -1;
    for (int i = 0; i < c->size && first < 0; i++)
        if (rcs[i] != 0) first = i;
    if (first < 0) return 0;
    int frc = rcs[first];
    char line[MSG];
    snprintf(line, sizeof line, "%s", first == c->rank && msg ? msg : "");
    r = MPI_Bcast(line, MSG, MPI_CHAR, first, c->world);
    if (r != MPI_SUCCESS) return mpi_error(r, "MPI_Bcast", msg, msglen);
    line[MSG - 1] = 0;
    if (msg && c->size > 1) snprintf(msg, msglen, "rank %d: %s", first, line);
    else if (msg) snprintf(msg, msglen, "%s", line);
    return frc;
}

#else // no MPI in this build: the world of one

struct comm {
    int rank, size, local_rank, local_size;
};

static comm_t world_ = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1};

comm_t *comm_world(void) { return &world_; }
comm_t *comm_second(void) { return NULL; }
int comm_rank(const comm_t *c) { return c->rank; }
int comm_size(const comm_t *c) { return c->size; }
int comm_local_rank(const comm_t *c) { return c->local_rank; }
int comm_local_size(const comm_t *c) { return c->local_size; }
int comm_is_mpi(const comm_t *c) { (void)c; return 0; }

int comm_init(int *argc, char ***argv, char *err, size_t errlen) {
    (void)argc;
    (void)argv;
    if (!launched()) return 0;
    snprintf(err, errlen, "started by a launcher (mpirun, srun), but this build has no MPI (install Debian's "
             "libopenmpi-dev and rebuild; scripts/deps.sh does)");
    return -ENODEV;
}

void comm_finalize(void) {}

int comm_allgather(comm_t *c, const void *mine, void *all, size_t bytes, char *err, size_t errlen) {
    (void)c; (void)err; (void)errlen;
    memmove(all, mine, bytes);
    return 0;
}

int comm_allgather_pieces(comm_t *c, void *buf, size_t n, size_t elem, char *err, size_t errlen) {
    (void)c; (void)buf; (void)n; (void)elem; (void)err; (void)errlen;
    return 0;
}

int comm_allgatherv(comm_t *c, const void *mine, void *all, const size_t *counts, const size_t *displs, char *err,
                    size_t errlen) {
    (void)c; (void)err; (void)errlen;
    memmove((char *)all + displs[0], mine, counts[0]);
    return 0;
}

int comm_alltoall_pieces(comm_t *c, const float *send, float *recv, size_t n, char *err, size_t errlen) {
    (void)c; (void)err; (void)errlen;
    memmove(recv, send, n * sizeof(float));
    return 0;
}

int comm_bcast(comm_t *c, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    (void)c; (void)buf; (void)bytes; (void)root; (void)err; (void)errlen;
    return 0;
}

int comm_bcast_rc(comm_t *c, int rc, const char *what, char *err, size_t errlen) {
    (void)c; (void)what; (void)err; (void)errlen;
    return rc;
}

int comm_max_int(comm_t *c, int mine, int *max, char *err, size_t errlen) {
    (void)c; (void)err; (void)errlen;
    *max = mine;
    return 0;
}

int comm_barrier(comm_t *c, char *err, size_t errlen) {
    (void)c; (void)err; (void)errlen;
    return 0;
}

int comm_agree(comm_t *c, int rc, char *msg, size_t msglen) {
    (void)c; (void)msg; (void)msglen;
    return rc;
}
#endif
