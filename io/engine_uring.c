// engine_uring.c — the io_uring engine: one io thread owns the ring (it creates it,
// registers buffers and files, submits and reaps; nothing else touches the ring, so the
// ring needs no lock and SINGLE_ISSUER/DEFER_TASKRUN are allowed). Requests live in a
// fixed array of qd slots; one busy slot is one SQE in flight and one piece (liburing
// examples/kdigest.c, fio's io_uring engine). Submitters wake the thread through an
// eventfd the ring itself is reading, so the thread only ever sleeps in io_uring_enter.
//
// Loop: take pieces for every free slot (under the store lock) → prepare their SQEs →
// io_uring_submit_and_wait(1) → for each CQE: -EAGAIN/-EINTR resubmit, short transfer
// advance and resubmit, error or done complete the piece → io_uring_cq_advance (each
// completion is marked seen exactly once) → again.
// Setup tries the optional flags and drops them one at a time on EINVAL (fio's setup);
// SQPOLL, when asked for, is dropped with a notice if refused.
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>
#include "io_internal.h"

#define EFD_TAG UINT64_MAX  // user_data of the eventfd read; slots use their index
#define IO_MAX_RETRIES 1000 // consecutive -EAGAIN/-EINTR on one piece before it fails

typedef struct {
    io_piece_t p;
    uint32_t done;          // bytes of p already transferred (short transfers)
    int retries;
    int busy;
    int buf_index;          // registered buffer holding p.buf..p.buf+p.len, or -1
} uslot_t;

typedef struct {
    nvme_store_t *s;
    struct io_uring ring;
    uslot_t *slots;
    int *freel, nfree, nslots, nbusy;
    int *took;              // slot indices taken in one dispatch pass
    int efd;
    uint64_t efd_val;       // the eventfd read's target
    int dead;               // io_uring_enter failed for good: pieces fail with this
    pthread_t th;
    pthread_cond_t ready_cv;
    int ready, rc;          // s->mu: the thread's setup result
    char err[512];
    int stop;               // s->mu
} uring_t;

// ---------------------------------------------------------------- setup (io thread)

static int try_init(uring_t *u, unsigned entries, int sqpoll) {
    static const unsigned sets[] = {
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER,
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN,
        IORING_SETUP_SUBMIT_ALL,
        0,
    };
    int rc = -EINVAL;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        p.flags = sets[i];
        if (sqpoll) {
            // task-run flags are for rings whose submitter reaps; SQPOLL rejects them
            p.flags &= ~(IORING_SETUP_COOP_TASKRUN | IORING_SETUP_DEFER_TASKRUN);
            p.flags |= IORING_SETUP_SQPOLL;
            p.sq_thread_idle = 1000; // ms before the poller sleeps
        }
        rc = io_uring_queue_init_params(entries, &u->ring, &p);
        if (rc != -EINVAL) return rc;
    }
    return rc;
}

static const char *setup_hint(int e) {
    static char buf[160];
    FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
    int disabled = 0;
    if (f) {
        if (fscanf(f, "%d", &disabled) != 1) disabled = 0;
        fclose(f);
    }
    if (disabled) {
        snprintf(buf, sizeof buf, " (kernel.io_uring_disabled=%d)", disabled);
        return buf;
    }
    if (e == ENOSYS) return " (this kernel has no io_uring)";
    if (e == EPERM || e == EACCES) return " (blocked, as a container's seccomp profile often does)";
    return "";
}

static int setup(uring_t *u) {
    nvme_store_t *s = u->s;
    unsigned entries = (unsigned)s->qd + 1; // + the eventfd read
    int rc;
    if (s->sqpoll_req) {
        rc = try_init(u, entries, 1);
        if (rc == 0) s->sqpoll = 1;
        else {
            io_notice(s, "--io-sqpoll: the kernel refused SQPOLL (%s); continuing without it", strerror(-rc));
            rc = try_init(u, entries, 0);
        }
    } else {
        rc = try_init(u, entries, 0);
    }
    if (rc < 0) {
        snprintf(u->err, sizeof u->err, "io_uring_setup: %s%s", strerror(-rc), setup_hint(-rc));
        return rc;
    }
    // Registration pins memory (counted against RLIMIT_MEMLOCK without CAP_IPC_LOCK):
    // a normal user with the usual 8 MiB limit gets ENOMEM. Unregistered I/O is still
    // correct, so carry on and say so once.
    int rcb = 0, rcf = 0;
    if (s->nbufs > 0) {
        rcb = (s->flags & IO_FLAG_NOREGISTER) ? -ENOMEM : io_uring_register_buffers(&u->ring, s->bufs, (unsigned)s->nbufs);
        if (rcb == 0) s->reg_bufs = s->nbufs;
    }
    rcf = (s->flags & IO_FLAG_NOREGISTER) ? -ENOMEM : io_uring_register_files(&u->ring, s->fds, (unsigned)s->npaths);
    if (rcf == 0) s->reg_files = s->npaths;
    if (rcb < 0 || rcf < 0) {
        int e = rcb < 0 ? -rcb : -rcf;
        char lim[64] = "unlimited", hint[256] = "";
        struct rlimit rl;
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) io_format_bytes(lim, sizeof lim, rl.rlim_cur);
        if (e == ENOMEM || e == EPERM)
            snprintf(hint, sizeof hint, "; registered memory counts against RLIMIT_MEMLOCK (%s): raise it with `ulimit -l unlimited` "
                     "(or memlock in /etc/security/limits.conf), or run with CAP_IPC_LOCK", lim);
        io_notice(s, "io_uring: registering %s failed (%s); continuing unregistered: correct, but each request maps its pages%s",
                  rcb < 0 && rcf < 0 ? "buffers and files" : rcb < 0 ? "buffers" : "files", strerror(e), hint);
    }
    return 0;
}

// ---------------------------------------------------------------- the loop (io thread)

static struct io_uring_sqe *get_sqe(uring_t *u) {
    struct io_uring_sqe *sqe;
    // The SQ has room for every slot plus the eventfd read, so this never loops in
    // practice; flushing makes room if it ever does.
    while (!(sqe = io_uring_get_sqe(&u->ring))) io_uring_submit(&u->ring);
    return sqe;
}

static void arm_efd(uring_t *u) {
    struct io_uring_sqe *sqe = get_sqe(u);
    io_uring_prep_read(sqe, u->efd, &u->efd_val, sizeof u->efd_val, 0);
    io_uring_sqe_set_data64(sqe, EFD_TAG);
}

static void complete_slot(uring_t *u, int i, int res, uint64_t err_foff) {
    io_piece_t p = u->slots[i].p;
    u->slots[i].busy = 0;
    u->freel[u->nfree++] = i;
    u->nbusy--;
    io_piece_done(u->s, &p, res, err_foff);
}

static void prep_slot(uring_t *u, int i) {
    uslot_t *sl = &u->slots[i];
    nvme_store_t *s = u->s;
    if (u->dead) {
        complete_slot(u, i, u->dead, sl->p.foff + sl->done);
        return;
    }
    struct io_uring_sqe *sqe = get_sqe(u);
    char *buf = sl->p.buf + sl->done;
    unsigned len = io_fault_trim(&sl->p, sl->p.len - sl->done);
    uint64_t off = sl->p.foff + sl->done;
    int fd = s->reg_files ? sl->p.file : s->fds[sl->p.file];
    if (sl->buf_index >= 0) {
        if (sl->p.op == IO_READ) io_uring_prep_read_fixed(sqe, fd, buf, len, off, sl->buf_index);
        else io_uring_prep_write_fixed(sqe, fd, buf, len, off, sl->buf_index);
    } else {
        if (sl->p.op == IO_READ) io_uring_prep_read(sqe, fd, buf, len, off);
        else io_uring_prep_write(sqe, fd, buf, len, off);
    }
    if (s->reg_files) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, (uint64_t)i);
}

static void handle_cqe(uring_t *u, int i, int res) {
    uslot_t *sl = &u->slots[i];
    nvme_store_t *s = u->s;
    res = io_fault_apply(&sl->p, res); // only a piece's first completion carries one
    if ((res == -EAGAIN || res == -EINTR) && ++sl->retries <= IO_MAX_RETRIES) {
        atomic_fetch_add_explicit(&s->st_retries, 1, memory_order_relaxed);
        prep_slot(u, i);
        return;
    }
    if (res < 0) { complete_slot(u, i, res, sl->p.foff + sl->done); return; }
    if (res == 0) { complete_slot(u, i, -EIO, sl->p.foff + sl->done); return; } // end of file inside the store
    sl->retries = 0;
    sl->done += (uint32_t)res;
    if (sl->done < sl->p.len) {
        atomic_fetch_add_explicit(&s->st_shorts, 1, memory_order_relaxed);
        prep_slot(u, i);
        return;
    }
    complete_slot(u, i, 0, 0);
}

static int find_buf(const nvme_store_t *s, const char *buf, uint32_t len) {
    for (int b = 0; b < s->reg_bufs; b++) {
        const char *base = s->bufs[b].iov_base;
        if (buf >= base && buf + len <= base + s->bufs[b].iov_len) return b;
    }
    return -1;
}

static void loop(uring_t *u) {
    nvme_store_t *s = u->s;
    int armed = 0;
    for (;;) {
        if (!armed) { arm_efd(u); armed = 1; }
        int n = 0, more, stop;
        pthread_mutex_lock(&s->mu);
        io_piece_t p;
        while (u->nfree > 0 && io_queue_take(s, &p)) {
            int i = u->freel[--u->nfree];
            u->nbusy++;
            u->slots[i].p = p;
            u->slots[i].done = 0;
            u->slots[i].retries = 0;
            u->slots[i].busy = 1;
            u->took[n++] = i;
        }
        more = io_queue_has_work(s);
        stop = u->stop;
        pthread_mutex_unlock(&s->mu);
        int nskip = 0;
        for (int k = 0; k < n; k++) {
            uslot_t *sl = &u->slots[u->took[k]];
            if (sl->p.skip) { complete_slot(u, u->took[k], 0, 0); nskip++; continue; }
            sl->buf_index = find_buf(s, sl->p.buf, sl->p.len);
            if (sl->buf_index >= 0) atomic_fetch_add_explicit(&s->st_fixed, 1, memory_order_relaxed);
            prep_slot(u, u->took[k]);
        }
        if (nskip && more) continue; // slots came back at once: fill them before sleeping
        if (stop && u->nbusy == 0) break;
        if (u->dead) {
            // The ring is unusable: every piece already failed in prep_slot; sleep on the
            // eventfd itself until a submitter (or stop) writes it.
            uint64_t v;
            if (read(u->efd, &v, sizeof v) < 0 && errno != EINTR) break;
            continue;
        }

        int rc = io_uring_submit_and_wait(&u->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME) u->dead = rc;

        unsigned head, seen = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&u->ring, head, cqe) {
            seen++;
            uint64_t tag = io_uring_cqe_get_data64(cqe);
            if (tag == EFD_TAG) armed = 0; // woken by a submitter: re-armed at the top
            else handle_cqe(u, (int)tag, cqe->res);
        }
        io_uring_cq_advance(&u->ring, seen);
        if (u->dead) {
            // The ring cannot be entered any more: fail what is in flight rather than hang.
            for (int i = 0; i < u->nslots; i++)
                if (u->slots[i].busy) complete_slot(u, i, u->dead, u->slots[i].p.foff + u->slots[i].done);
        }
    }
}

static void *uring_thread(void *arg) {
    uring_t *u = arg;
    nvme_store_t *s = u->s;
    int rc = setup(u);
    pthread_mutex_lock(&s->mu);
    u->rc = rc;
    u->ready = 1;
    pthread_cond_broadcast(&u->ready_cv);
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) return NULL; // start() joins and frees u
    loop(u);
    io_uring_queue_exit(&u->ring); // cancels the pending eventfd read
    return NULL;
}

// ---------------------------------------------------------------- interface

static void uring_free(uring_t *u) {
    if (!u) return;
    if (u->efd >= 0) close(u->efd);
    pthread_cond_destroy(&u->ready_cv);
    free(u->slots);
    free(u->freel);
    free(u->took);
    free(u);
}

static int uring_start(nvme_store_t *s, char *err, size_t errlen) {
    if (s->flags & IO_FLAG_NOURING) {
        snprintf(err, errlen, "io_uring_setup: %s (forced by the io fault 'nouring')", strerror(ENOSYS));
        return -ENOSYS;
    }
    uring_t *u = calloc(1, sizeof *u);
    if (!u) return -ENOMEM;
    u->s = s;
    u->nslots = s->qd;
    u->slots = calloc((size_t)u->nslots, sizeof *u->slots);
    u->freel = calloc((size_t)u->nslots, sizeof *u->freel);
    u->took = calloc((size_t)u->nslots, sizeof *u->took);
    u->efd = eventfd(0, EFD_CLOEXEC);
    pthread_cond_init(&u->ready_cv, NULL);
    if (!u->slots || !u->freel || !u->took || u->efd < 0) {
        int e = u->efd < 0 ? errno : ENOMEM;
        snprintf(err, errlen, "io_uring engine: %s", strerror(e));
        uring_free(u);
        return -e;
    }
    for (int i = 0; i < u->nslots; i++) u->freel[u->nfree++] = u->nslots - 1 - i;
    s->eng = u;
    int rc = pthread_create(&u->th, NULL, uring_thread, u);
    if (rc != 0) {
        snprintf(err, errlen, "io_uring engine: starting the io thread: %s", strerror(rc));
        s->eng = NULL;
        uring_free(u);
        return -rc;
    }
    pthread_mutex_lock(&s->mu);
    while (!u->ready) pthread_cond_wait(&u->ready_cv, &s->mu);
    rc = u->rc;
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) {
        pthread_join(u->th, NULL);
        snprintf(err, errlen, "%s", u->err);
        s->eng = NULL;
        uring_free(u);
        return rc;
    }
    return 0;
}

// Called with s->mu held (so the engine cannot be stopped under it).
static void uring_kick(nvme_store_t *s) {
    uring_t *u = s->eng;
    uint64_t one = 1;
    while (write(u->efd, &one, sizeof one) < 0 && errno == EINTR) {}
}

static void uring_stop(nvme_store_t *s) {
    uring_t *u = s->eng;
    if (!u) return;
    pthread_mutex_lock(&s->mu);
    u->stop = 1;
    uring_kick(s);
    pthread_mutex_unlock(&s->mu);
    pthread_join(u->th, NULL);
    s->eng = NULL;
    uring_free(u);
}

const io_engine_ops_t io_engine_uring = {"io_uring", uring_start, uring_kick, uring_stop};
