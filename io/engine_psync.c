// engine_psync.c — the fallback engine: a pool of min(qd, 16) threads, each taking one
// piece at a time from the store's queue and moving it with pread/pwrite. Used when
// io_uring is unavailable (containers, io_uring_disabled) or --io-engine psync.
// Same contract as the uring engine (io_internal.h): short transfers continued, -EAGAIN
// and -EINTR retried, any other error fails the piece with its file offset.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io_internal.h"

#define PSYNC_MAX_THREADS 16
#define IO_MAX_RETRIES 1000 // consecutive -EAGAIN/-EINTR on one piece before it fails

typedef struct {
    pthread_t th[PSYNC_MAX_THREADS];
    int n;
    int stop; // s->mu
} psync_t;

static void run_piece(nvme_store_t *s, io_piece_t *p) {
    if (p->skip) {
        io_piece_done(s, p, 0, 0);
        return;
    }
    int fd = s->fds[p->file];
    uint32_t done = 0;
    int retries = 0;
    while (done < p->len) {
        uint32_t want = io_fault_trim(p, p->len - done);
        ssize_t r = p->op == IO_READ ? pread(fd, p->buf + done, want, (off_t)(p->foff + done))
                                     : pwrite(fd, p->buf + done, want, (off_t)(p->foff + done));
        int res = r < 0 ? -errno : (int)r;
        res = io_fault_apply(p, res); // only the first completion carries a fault
        if ((res == -EAGAIN || res == -EINTR) && ++retries <= IO_MAX_RETRIES) {
            atomic_fetch_add_explicit(&s->st_retries, 1, memory_order_relaxed);
            continue;
        }
        if (res < 0) { io_piece_done(s, p, res, p->foff + done); return; }
        if (res == 0) { io_piece_done(s, p, -EIO, p->foff + done); return; } // end of file inside the store
        retries = 0;
        done += (uint32_t)res;
        if (done < p->len) atomic_fetch_add_explicit(&s->st_shorts, 1, memory_order_relaxed);
    }
    io_piece_done(s, p, 0, 0);
}

static void *worker(void *arg) {
    nvme_store_t *s = arg;
    psync_t *e = s->eng;
    io_piece_t p;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (io_queue_take(s, &p)) {
            pthread_mutex_unlock(&s->mu);
            run_piece(s, &p);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (e->stop) break;
        pthread_cond_wait(&s->cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void psync_stop(nvme_store_t *s) {
    psync_t *e = s->eng;
    if (!e) return;
    pthread_mutex_lock(&s->mu);
    e->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < e->n; i++) pthread_join(e->th[i], NULL);
    free(e);
    s->eng = NULL;
}

static int psync_start(nvme_store_t *s, char *err, size_t errlen) {
    psync_t *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    s->eng = e;
    int want = s->qd < PSYNC_MAX_THREADS ? s->qd : PSYNC_MAX_THREADS;
    for (int i = 0; i < want; i++) {
        int rc = pthread_create(&e->th[i], NULL, worker, s);
        if (rc != 0) {
            snprintf(err, errlen, "io psync: starting worker thread %d of %d: %s", i + 1, want, strerror(rc));
            psync_stop(s);
            return -rc;
        }
        e->n++;
    }
    return 0;
}

static void psync_kick(nvme_store_t *s) {
    // Called with s->mu held. Several pieces may have arrived: wake every idle worker (a
    // spurious wake costs one empty pass through the queue; a missing one would strand a
    // piece).
    pthread_cond_broadcast(&s->cv);
}

const io_engine_ops_t io_engine_psync = {"psync", psync_start, psync_kick, psync_stop};
