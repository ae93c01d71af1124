// io_internal.h — what store.c shares with the two engines (engine_uring.c,
// engine_psync.c). Not for callers outside io/.
//
// The request queue: submit appends a ticket (under s->mu) to its op's FIFO of tickets
// that still have undispatched bytes. An engine thread takes pieces with io_queue_take
// (under s->mu): each piece is the next ≤ block bytes of the head ticket of the op whose
// turn it is, cut at stripe boundaries, with its file, file offset, sequence numbers and
// any fault armed for it. The engine performs the piece and calls io_piece_done exactly
// once per piece (outside s->mu); the piece that brings the ticket's `left` to zero
// finalizes it.
//
// Within an op's queue urgent tickets come first, then plain ones, then lazy ones (each in
// submit order); a lazy ticket at the head waits while lazy_cap of its pieces are in flight.
//
// Turns: the device is given one op at a time. Reads and writes mixed in one queue make
// a disk take turns anyway, piece by piece, and then each op's requests wait behind the
// other's (a prefetch's read behind the update's write-back). So the queue gives the
// device whole turns: a turn ends when its op has nothing left to dispatch, or has
// dispatched `turn` bytes while the other op has work waiting, or the other op's first
// request is urgent (io_req_t) and its own is not; then its pieces drain and
// the other op's turn begins. Within a turn up to qd pieces are in flight as before.
// Each op's busy time is then the time the device was serving it, and bytes / busy is
// that op's achieved rate.
#pragma once
#include <pthread.h>
#include <stdarg.h>
#include "io.h"

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define ALIGN_UP(a, b) (CEIL_DIV((a), (b)) * (b))

#define IO_MAX_FAULTS 8

typedef enum { FAULT_NONE = 0, FAULT_ERRNO, FAULT_SHORT, FAULT_EAGAIN } io_fault_kind_t;

typedef struct {
    io_fault_kind_t kind;
    int err;                 // FAULT_ERRNO: positive errno
    int op;                  // -1 any, else io_op_t
    uint64_t k;              // fires on the k-th piece (of op, or of all) since arming
    int fired;
} io_fault_t;

typedef struct {
    io_ticket_t *t;
    io_op_t op;
    int file;
    uint64_t foff;           // offset in the file
    char *buf;
    uint32_t len;
    int skip;                // the ticket already failed: complete without I/O
    io_fault_kind_t fault;   // injected into this piece's first completion
    int fault_err;
    unsigned slow_ms;        // its first completion is held this long (the fault slow=MS)
    int lazy;                // its ticket's (counted in lazy_pieces until it retires)
} io_piece_t;

// The engine interface. start runs in nvme_store_init after the files exist; on failure
// it returns -errno with a line in err and leaves nothing running. kick says the queue
// gained work; it is called with s->mu held and must not block. stop is called once the queue is drained
// and every piece completed; it stops threads and frees the engine.
typedef struct {
    const char *name;
    int (*start)(nvme_store_t *s, char *err, size_t errlen);
    void (*kick)(nvme_store_t *s);
    void (*stop)(nvme_store_t *s);
} io_engine_ops_t;

extern const io_engine_ops_t io_engine_uring;
extern const io_engine_ops_t io_engine_psync;

enum { IO_FLAG_NOURING = 1, IO_FLAG_NOREGISTER = 2, IO_FLAG_NODIRECT = 4, IO_FLAG_FREE = 8 };

struct nvme_store {
    // ---- layout (immutable after init)
    int npaths;
    char *dirs[IO_MAX_PATHS];
    char *files[IO_MAX_PATHS];
    int fds[IO_MAX_PATHS];
    uint64_t size, file_size, block;
    int qd, verify, keep, quiet, sqpoll_req;
    unsigned flags;                 // IO_FLAG_* from the init fault spec
    uint64_t fake_free;             // IO_FLAG_FREE
    struct iovec bufs[IO_MAX_BUFS]; // regions to register (copied from opts)
    int nbufs;
    // ---- engine
    const io_engine_ops_t *ops;
    void *eng;
    _Atomic int notices;
    int reg_bufs, reg_files, sqpoll;
    // ---- queue (mu)
    pthread_mutex_t mu;
    pthread_cond_t cv;              // psync workers wait here for pieces
    pthread_cond_t idle_cv;         // nvme_store_free waits here for inflight == 0
    io_ticket_t *qhead[2], *qtail[2]; // [op]: tickets with undispatched pieces, in submit order
    uint64_t inflight;              // tickets submitted and not yet finalized
    int turn_op;                    // the op whose turn it is
    uint64_t turn_bytes, turn;      // bytes dispatched in this turn; the most once the other op waits
    uint64_t qseq;
    int stopping;
    uint64_t seq_all, seq_op[2];
    uint64_t op_pieces[2];          // pieces of each op dispatched and not completed, for the busy time
    uint64_t lazy_pieces, lazy_cap; // lazy requests' pieces in flight, and the most (io_req_t.lazy)
    double op_since[2], op_busy_ms[2]; // when the op's current busy spell began; the spells so far
    io_fault_t faults[IO_MAX_FAULTS];
    int nfaults;
    unsigned slow_ms[2];            // [op]: the fault slow=MS, every piece from arming on
    // ---- stats
    _Atomic uint64_t st_bytes[2], st_pieces[2], st_requests, st_retries, st_shorts, st_errors, st_fixed;
};

// Takes the next piece under s->mu (caller holds it). Returns 0 when the queue is empty,
// or while one op's pieces drain before the other op's turn (the last of them to complete
// kicks the engine).
int io_queue_take(nvme_store_t *s, io_piece_t *p);
// 1 when the queue has undispatched pieces (caller holds s->mu); io_queue_take may still
// return 0 while a turn ends.
static inline int io_queue_has_work(const nvme_store_t *s) { return s->qhead[0] || s->qhead[1]; }
// Completes one piece: res is 0 or -errno; err_foff the file offset where it failed.
// Finalizes the ticket when it was its last piece. Thread-safe; call without s->mu.
void io_piece_done(nvme_store_t *s, io_piece_t *p, int res, uint64_t err_foff);
// Injected faults, each used once. io_fault_trim is applied to the length of a piece's
// first transfer: a FAULT_SHORT piece asks the device for only part of it, so the engine
// sees a genuine short completion (and the rest of the buffer is really not moved).
// io_fault_apply replaces a completion's result for FAULT_ERRNO / FAULT_EAGAIN.
uint32_t io_fault_trim(io_piece_t *p, uint32_t len);
int io_fault_apply(io_piece_t *p, int res);
// Counts one fallback notice and prints it unless quiet.
void io_notice(nvme_store_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// io_vnotice (io.h) with arguments: io/ prints nothing else.
void io_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
