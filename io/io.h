// io.h — the NVMe tier's engine: a store of preallocated O_DIRECT files under one or more
// directories, and asynchronous reads/writes of its extents that complete tickets.
//
// What it does:
//   * nvme_store_init creates one file per --nvme-path directory, checks the space first
//     (all paths on one filesystem are summed), reserves it with fallocate, opens it
//     O_DIRECT and proves O_DIRECT works with one 4 KiB write+read. Unless `keep`, each
//     file is unlinked right after it is opened, so nothing is left behind even on a crash.
//   * The store is one flat byte range [0, size). With several paths it is striped: stripe
//     unit = the io block, stripe s lives in file s % npaths at offset (s / npaths)·block.
//   * A request (read or write of one extent) is split into pieces of at most `block`
//     bytes (never crossing a stripe), and at most `qd` pieces are in flight. The request
//     completes its caller-owned ticket once every piece has: res 0, or -errno with the
//     file and file offset of the first failure kept for io_ticket_message().
//   * Two engines behind one interface: io_uring (one io thread owns the ring: batched
//     submits, registered buffers and files when allowed, short transfers continued,
//     -EAGAIN resubmitted) and psync (a pool of pread/pwrite threads). `auto` picks io_uring
//     and falls back to psync when io_uring_setup fails, saying so once.
//   * --io-verify: CRC32C of each extent written, checked on read (see io_ticket_t.crc).
//   * Fault injection for tests (nvme_store_inject, or TT_IO_FAULT in the environment).
//
// What it does not do: know about shards, models or tiers; order overlapping requests
// (two in-flight requests touching the same bytes race, as they would on the device — the
// caller orders them through their tickets); allocate anything per request.
//
// Who calls it: the tier (issue 4) creates one store per run and submits shard-state
// extents from the scheduler's workers; bench/bench_io.c; tests/test_io*.c.
//
// Errors: setup (nvme_store_init) returns -errno and writes one line without the
// "tiertrain: " prefix into err, naming the path, the value and the fix. The runtime path
// never exits and never prints: it returns/records -errno. Fallback notices (engine,
// registration, SQPOLL) are printed once per store with notice().
#pragma once
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define IO_ALIGN 4096u       // offsets, lengths and buffers are multiples of this
#define IO_MAX_PATHS 16      // --nvme-path directories
#define IO_MAX_BUFS 64       // regions registered with io_uring

typedef struct nvme_store nvme_store_t;
typedef struct io_ticket io_ticket_t;

typedef enum { IO_READ = 0, IO_WRITE = 1 } io_op_t;
typedef enum { IO_ENGINE_AUTO = 0, IO_ENGINE_URING, IO_ENGINE_PSYNC } io_engine_kind_t;

// Called once per ticket, on an engine thread (the io thread, or a psync worker), after
// the ticket's result is final (t->res valid) and just before waiters are released (so
// io_ticket_poll(t) still says 0 inside it). It may submit new requests; it must not
// block, wait on a ticket, or free the store.
typedef void (*io_ticket_cb)(io_ticket_t *t, void *arg);

// One request's completion: caller-owned storage, embedded wherever the caller keeps
// the extent's bookkeeping (no allocation per request). A zeroed ticket is idle; a ticket
// may be resubmitted once it is done. The caller reads `res`, `crc` and the error fields
// only after io_ticket_wait() returned or io_ticket_poll() said 1 (that load is the
// acquire pairing with the engine's release); everything else is the engine's.
struct io_ticket {
    // ---- the request (copied in at submit)
    io_op_t op;
    uint64_t off, len;        // extent in the store
    void *buf;                // caller's buffer: not touched by the caller until done
    const char *name;         // label for messages ("shard 3 o32"); NULL = none; must
                              // outlive the ticket's use of it (a string literal is fine)
    int urgent;               // see io_req_t
    int lazy;                 // see io_req_t
    // ---- results
    int res;                  // 0, or -errno
    uint32_t crc;             // with verify: CRC32C of the extent. IO_WRITE: computed at
                              // submit from buf. IO_READ: the expected value, passed in by
                              // the caller (the crc its write returned); a mismatch gives
                              // res = -EBADMSG naming the extent.
    uint32_t crc_read;        // IO_READ with verify: the CRC32C of what was read
    int err_file;             // index of the file where the first error happened, or -1
    uint64_t err_foff;        // offset in that file
    const char *why;          // static text for errors that are not an errno from the
                              // device (misaligned request, CRC mismatch), or NULL
    // ---- engine-private
    nvme_store_t *store;
    io_ticket_cb cb;
    void *cb_arg;
    io_ticket_t *qnext;       // pending-queue link (store lock)
    uint64_t next;            // next store offset to dispatch (store lock)
    uint64_t qseq;            // submit order, for messages and tests
    _Atomic uint64_t left;    // bytes not yet completed (dispatched or not)
    _Atomic int err_set;      // first failing piece wins the right to write res/err_*
    _Atomic int state;        // io_ticket_state_t
};

typedef enum { IO_TICKET_IDLE = 0, IO_TICKET_PENDING, IO_TICKET_WAITING, IO_TICKET_DONE } io_ticket_state_t;

// ---------------------------------------------------------------- store setup

// Free-space hook: writes the bytes available to this process on dir's filesystem.
// Default (NULL): statvfs f_bavail·f_frsize. Tests use it to simulate a full disk.
typedef int (*io_free_fn)(const char *dir, uint64_t *free_bytes, void *arg);

typedef struct {
    const char *paths;        // "DIR[,DIR...]"; NULL or "" = $TMPDIR, else /tmp
    uint64_t size;            // bytes the store must hold (rounded up to 4 KiB)
    uint64_t block;           // piece size and stripe unit, multiple of 4 KiB (0 = 1 MiB)
    int qd;                   // pieces in flight at most (0 = 32)
    io_engine_kind_t engine;  // IO_ENGINE_AUTO / URING / PSYNC
    int sqpoll;               // try IORING_SETUP_SQPOLL (dropped with a notice if refused)
    int verify;               // CRC32C per extent (see io_ticket_t.crc)
    int keep;                 // keep the files after nvme_store_free (else unlinked at init)
    int quiet;                // no notices (fallbacks are still recorded, see nvme_store_info)
    const struct iovec *bufs; // memory to register with io_uring (e.g. the host pool's
    int nbufs;                // hostmem_regions): at most IO_MAX_BUFS, each ≤ 1 GiB; pieces
                              // whose buffer lies in one region use READ_FIXED/WRITE_FIXED,
                              // others plain READ/WRITE. The array is copied at init.
    const char *faults;       // fault spec (see nvme_store_inject); NULL = $TT_IO_FAULT
    io_free_fn free_bytes;    // NULL = statvfs
    void *free_arg;
} nvme_store_opts_t;

// Creates the store and starts its engine. Returns 0 and *out, or -errno with one line in
// err (no "tiertrain: " prefix), having left no file behind. Errors it explains:
//   -EINVAL  bad options; a filesystem that refuses O_DIRECT (tmpfs before Linux 6.6, some
//            network/FUSE filesystems); a malformed fault spec
//   -ENOSPC  a path without room: "--nvme-path DIR: needs X, Y free (...)"
//   -ENOENT, -EACCES, ...  a path that cannot hold the file
//   -ENODEV                --io-engine uring where io_uring is unavailable (the reason in err)
// Not thread-safe with respect to the same *out; stores are independent of each other.
int nvme_store_init(nvme_store_t **out, const nvme_store_opts_t *o, char *err, size_t errlen);

// Waits for every submitted request to complete, stops the engine, closes (and unless
// keep, has already unlinked) the files. NULL-safe. No request may be submitted during
// or after it.
void nvme_store_free(nvme_store_t *s);

// ---------------------------------------------------------------- requests
// All submit functions are thread-safe (any number of threads may submit concurrently)
// and never block on the device: the request is queued and the call returns. They return
// 0 when queued, or, before anything is queued:
//   -EINVAL  offset/length not a multiple of 4096, length 0, buffer not 4096-aligned, or
//            the extent past the store's end (t->res = -EINVAL, t->why says which, the
//            ticket is done, the callback is not called)
//   -EBUSY   t is still in flight (nothing changes)
//   -ESHUTDOWN the store is being freed
// Between submit and completion the buffer belongs to the engine.

int nvme_store_read(nvme_store_t *s, io_ticket_t *t, uint64_t off, uint64_t len, void *buf, uint32_t crc);
int nvme_store_write(nvme_store_t *s, io_ticket_t *t, uint64_t off, uint64_t len, const void *buf);

typedef struct {
    io_op_t op;
    uint64_t off, len;
    void *buf;
    const char *name;         // label for messages, may be NULL
    uint32_t crc;             // IO_READ with verify: expected CRC32C
    io_ticket_cb cb;          // may be NULL
    void *cb_arg;
    int urgent;               // someone waits for it now: queued ahead of its op's other
                              // requests (after earlier urgent ones), and the other op's
                              // turn ends for it (io_internal.h: turns) once its pieces drain
    int lazy;                 // wanted later (a read ahead): queued behind its op's other
                              // requests, with at most qd / IO_LAZY_SHARE lazy pieces in
                              // flight (at least one), so that a request queued after it
                              // waits for fewer pieces than qd
} io_req_t;
// Lazy pieces in flight: at most qd / IO_LAZY_SHARE. On the 2-core VM's disk (qd 32), small's
// NVMe case took 114 ms a step with 16 (share 2), 113 with 24, 123 with 8 and 135 with 32.
#define IO_LAZY_SHARE 2
int nvme_store_submit(nvme_store_t *s, io_ticket_t *t, const io_req_t *r);

// Blocks until t is done (no timer: a futex on the ticket's state) and returns t->res.
// An idle (never submitted) ticket returns its res at once. Any thread may wait; several
// threads may wait on one ticket.
int io_ticket_wait(io_ticket_t *t);
// 1 when t is done or was never submitted (then t->res is valid), else 0. Never blocks.
int io_ticket_poll(const io_ticket_t *t);
// One line (no "tiertrain: " prefix) for a failed ticket: what, which extent, the file
// and file offset, strerror, and the fix, e.g.
//   nvme read of 'shard 3 o32' (1.0 MiB at store offset 64.0 MiB): /mnt/a/tiertrain-42-0-0.nvme
//   offset 33554432: Input/output error (the device reported an error: check dmesg ...)
// For res == 0 writes "ok". Returns buf.
char *io_ticket_message(const io_ticket_t *t, char *buf, size_t len);

// ---------------------------------------------------------------- faults (tests)
// Arms request faults; counting starts at this call. spec is a comma-separated list of
//   [read:|write:]eio@K        the K-th request (piece) fails with -EIO
//   [read:|write:]errno=N@K    ... with -N (N a number or a name: ENOSPC, EROFS, ...)
//   [read:|write:]short@K      the K-th request's first transfer asks the device for only
//                              half its bytes (4 KiB-rounded; 512 B of a 4 KiB piece), so
//                              it completes genuinely short and the engine must continue it
//   [read:|write:]eagain@K     the K-th request returns -EAGAIN once
//   [read:|write:]slow=MS      every request from arming on completes MS ms late (a slow
//                              device; the engine's completions wait in turn)
// K counts pieces from 1, in dispatch order, over all ops or only the named op. Each
// fault fires once. Init-time items are accepted (and only honoured) by
// nvme_store_opts_t.faults / TT_IO_FAULT:
//   nouring      io_uring_setup fails with -ENOSYS (tests the auto fallback)
//   noregister   buffer/file registration fails with -ENOMEM (a non-root memlock limit)
//   nodirect     open(O_DIRECT) fails with -EINVAL (a filesystem without O_DIRECT)
//   free=SIZE    every path reports SIZE bytes free
// Returns 0, or -EINVAL with a line in err. Thread-safe.
int nvme_store_inject(nvme_store_t *s, const char *spec, char *err, size_t errlen);

// ---------------------------------------------------------------- introspection

typedef struct {
    uint64_t bytes_read, bytes_written;     // completed successfully
    uint64_t pieces_read, pieces_written;   // dispatched pieces
    uint64_t requests;                      // tickets accepted
    uint64_t retries;                       // -EAGAIN/-EINTR resubmissions
    uint64_t shorts;                        // short-transfer continuations
    uint64_t errors;                        // failed pieces
    uint64_t fixed;                         // pieces sent with a registered buffer
    double busy_ms[2];                      // [IO_READ], [IO_WRITE]: time with at least one such
                                            // request in flight (bytes / busy: the achieved rate)
} io_stats_t;
void nvme_store_stats(const nvme_store_t *s, io_stats_t *out); // thread-safe snapshot

typedef struct {
    const char *engine;       // "io_uring" or "psync"
    int registered_bufs;      // io_uring buffers registered (0 after a fallback)
    int registered_files;     // io_uring files registered
    int sqpoll;               // SQPOLL active
    int npaths;
    uint64_t size;            // usable bytes
    uint64_t file_size;       // bytes reserved per file
    uint64_t block;
    int qd;
    int verify;
    int notices;              // fallback notices this store printed (or would have, quiet)
} io_info_t;
void nvme_store_info(const nvme_store_t *s, io_info_t *out);
// Path of file i (0 ≤ i < npaths), for messages and tests.
const char *nvme_store_file(const nvme_store_t *s, int i);
// Maps a store offset to (file index, file offset): the striping rule above.
void nvme_store_locate(const nvme_store_t *s, uint64_t off, int *file, uint64_t *foff);

// ---------------------------------------------------------------- sizes and lines (io/size.c)
// The size syntax of every flag and message, here because io/ is the leaf that needs it first
// (fault specs, space errors) and src/util.h's parse_size / format_bytes are these.
// "512M", "4G", "1.5GiB", "4096", "64k" -> bytes: K/M/G/T and KiB/MiB/GiB/TiB are powers of
// 1024, KB/MB/GB/TB powers of 1000; the number is plain decimal (no sign, no hex). Returns 0,
// -EINVAL (not a size), -ERANGE (too large), -EDOM (above 0 but under one byte: rounds to 0).
int io_parse_size(const char *s, uint64_t *out);
// One line "tiertrain: <msg>" on stderr (src/util.h's notice and errors print through it).
void io_vnotice(const char *fmt, va_list ap);
// 1536 -> "1.5 KiB" into buf; returns buf.
char *io_format_bytes(char *buf, size_t len, uint64_t bytes);

// 0 when a file in dir can be created, opened O_DIRECT and written+read 4 KiB through it;
// else -errno (-EINVAL: the filesystem refuses O_DIRECT). Leaves nothing behind. Tests
// use it to skip (exit 77) on such a filesystem.
int nvme_dir_direct_ok(const char *dir);
