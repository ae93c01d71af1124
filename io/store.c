// store.c — the nvme store (see io.h): paths, space check, files, striping, the request
// queue shared by the engines, tickets, fault specs, messages. The engines themselves are
// engine_uring.c and engine_psync.c; this file never touches a ring or a worker thread.
#include "io_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "crc32c.h"

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__))

// CLOCK_MONOTONIC in ms, for the busy time of each op.
static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static _Atomic int store_counter; // file names stay unique across stores in one process

// ---------------------------------------------------------------- small helpers

void io_notice(nvme_store_t *s, const char *fmt, ...) {
    atomic_fetch_add(&s->notices, 1);
    if (s->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    io_vnotice(fmt, ap);
    va_end(ap);
}

void io_say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    io_vnotice(fmt, ap);
    va_end(ap);
}

static const char *fmtb(char *buf, size_t len, uint64_t b) { return io_format_bytes(buf, len, b); }

void nvme_store_locate(const nvme_store_t *s, uint64_t off, int *file, uint64_t *foff) {
    if (s->npaths == 1) {
        *file = 0;
        *foff = off;
        return;
    }
    uint64_t stripe = off / s->block;
    *file = (int)(stripe % (uint64_t)s->npaths);
    *foff = (stripe / (uint64_t)s->npaths) * s->block + off % s->block;
}

static long futex(_Atomic int *addr, int op, int val) {
    return syscall(SYS_futex, (int *)addr, op, val, NULL, NULL, 0);
}

// ---------------------------------------------------------------- fault specs

static const struct { const char *name; int err; } errnames[] = {
    {"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EROFS", EROFS}, {"EINVAL", EINVAL}, {"ENOMEM", ENOMEM},
    {"EBADF", EBADF}, {"EFAULT", EFAULT}, {"ENODEV", ENODEV}, {"ENXIO", ENXIO}, {"EDQUOT", EDQUOT},
    {"ETIMEDOUT", ETIMEDOUT}, {"EPERM", EPERM}, {"EACCES", EACCES}, {"EBADMSG", EBADMSG},
};

typedef struct {
    io_fault_t faults[IO_MAX_FAULTS];
    int nfaults;
    unsigned slow_ms[2];
    unsigned flags;
    uint64_t fake_free;
} fault_spec_t;

static int parse_faults(const char *spec, int at_init, fault_spec_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!spec || !*spec) return 0;
    char *copy = strdup(spec), *save = NULL;
    int rc = 0;
    if (!copy) return -ENOMEM;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ') item++;
        if (!*item) continue;
        if (strcmp(item, "nouring") == 0 || strcmp(item, "noregister") == 0 || strcmp(item, "nodirect") == 0 ||
            strncmp(item, "free=", 5) == 0) {
            if (!at_init) {
                ERR("io fault '%s': only valid when the store is created (TT_IO_FAULT or nvme_store_opts_t.faults)", item);
                rc = -EINVAL;
                break;
            }
            if (item[0] == 'f') {
                if (io_parse_size(item + 5, &out->fake_free) != 0) {
                    ERR("io fault '%s': bad size (use e.g. free=1G)", item);
                    rc = -EINVAL;
                    break;
                }
                out->flags |= IO_FLAG_FREE;
            } else {
                out->flags |= item[2] == 'u' ? IO_FLAG_NOURING : item[2] == 'r' ? IO_FLAG_NOREGISTER : IO_FLAG_NODIRECT;
            }
            continue;
        }
        io_fault_t f = {.op = -1};
        char *p = item;
        if (strncmp(p, "read:", 5) == 0) { f.op = IO_READ; p += 5; }
        else if (strncmp(p, "write:", 6) == 0) { f.op = IO_WRITE; p += 6; }
        if (strncmp(p, "slow=", 5) == 0) { // every piece of the op (or of both), no count
            char *e = NULL;
            unsigned long ms = strtoul(p + 5, &e, 10);
            if (e == p + 5 || *e || ms > 60000) goto bad;
            if (f.op != IO_WRITE) out->slow_ms[IO_READ] = (unsigned)ms;
            if (f.op != IO_READ) out->slow_ms[IO_WRITE] = (unsigned)ms;
            continue;
        }
        char *at = strchr(p, '@');
        char *end = NULL;
        unsigned long long k = at ? strtoull(at + 1, &end, 10) : 0;
        if (!at || !end || *end || k == 0) goto bad;
        *at = 0;
        if (strcmp(p, "eio") == 0) { f.kind = FAULT_ERRNO; f.err = EIO; }
        else if (strcmp(p, "short") == 0) f.kind = FAULT_SHORT;
        else if (strcmp(p, "eagain") == 0) f.kind = FAULT_EAGAIN;
        else if (strncmp(p, "errno=", 6) == 0) {
            f.kind = FAULT_ERRNO;
            char *e = NULL;
            long v = strtol(p + 6, &e, 10);
            if (e != p + 6 && !*e && v > 0 && v < 4096) f.err = (int)v;
            for (size_t i = 0; !f.err && i < sizeof errnames / sizeof errnames[0]; i++)
                if (strcasecmp(p + 6, errnames[i].name) == 0) f.err = errnames[i].err;
            if (!f.err) goto bad;
        } else goto bad;
        f.k = k;
        if (out->nfaults == IO_MAX_FAULTS) {
            ERR("io fault spec '%s': more than %d faults", spec, IO_MAX_FAULTS);
            rc = -EINVAL;
            break;
        }
        out->faults[out->nfaults++] = f;
        continue;
    bad:
        ERR("io fault '%s': not understood (accepted: [read:|write:]eio@K, errno=N@K, short@K, eagain@K, slow=MS; "
            "at creation also nouring, noregister, nodirect, free=SIZE)", item);
        rc = -EINVAL;
        break;
    }
    free(copy);
    return rc;
}

int nvme_store_inject(nvme_store_t *s, const char *spec, char *err, size_t errlen) {
    fault_spec_t fs;
    int rc = parse_faults(spec, 0, &fs, err, errlen);
    if (rc) return rc;
    pthread_mutex_lock(&s->mu);
    memcpy(s->faults, fs.faults, sizeof fs.faults);
    s->nfaults = fs.nfaults;
    memcpy(s->slow_ms, fs.slow_ms, sizeof fs.slow_ms);
    s->seq_all = s->seq_op[0] = s->seq_op[1] = 0;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int io_fault_apply(io_piece_t *p, int res) {
    if (p->slow_ms) { // a slow device: this piece's completion arrives late
        usleep(p->slow_ms * 1000u);
        p->slow_ms = 0;
    }
    io_fault_kind_t k = p->fault;
    if (k != FAULT_ERRNO && k != FAULT_EAGAIN) return res;
    p->fault = FAULT_NONE;
    return k == FAULT_ERRNO ? -p->fault_err : -EAGAIN;
}

uint32_t io_fault_trim(io_piece_t *p, uint32_t len) {
    if (p->fault != FAULT_SHORT) return len;
    p->fault = FAULT_NONE;
    // The device moves only part of the piece, as a real short transfer would; O_DIRECT
    // continues only at the logical block size, so cut at 4 KiB (512 B of a 4 KiB piece,
    // which then needs a 512 B-sector device to continue).
    uint32_t cut = len >= 8192 ? (len / 2) & ~(IO_ALIGN - 1) : len / 8;
    return cut ? cut : len;
}

// ---------------------------------------------------------------- paths and space

static int split_paths(nvme_store_t *s, const char *paths, char *err, size_t errlen) {
    const char *p = paths;
    char def[PATH_MAX];
    if (!p || !*p) {
        const char *t = getenv("TMPDIR");
        snprintf(def, sizeof def, "%s", t && *t ? t : "/tmp");
        p = def;
    }
    const char *cur = p;
    for (;;) {
        const char *comma = strchr(cur, ',');
        size_t n = comma ? (size_t)(comma - cur) : strlen(cur);
        while (n && cur[0] == ' ') { cur++; n--; }
        while (n && cur[n - 1] == ' ') n--;
        while (n > 1 && cur[n - 1] == '/') n--;
        if (n == 0) {
            ERR("--nvme-path '%s': empty entry (use DIR[,DIR...])", p);
            return -EINVAL;
        }
        if (s->npaths == IO_MAX_PATHS) {
            ERR("--nvme-path '%s': more than %d directories", p, IO_MAX_PATHS);
            return -EINVAL;
        }
        s->dirs[s->npaths] = strndup(cur, n);
        if (!s->dirs[s->npaths]) return -ENOMEM;
        s->npaths++;
        if (!comma) break;
        cur = comma + 1;
    }
    return 0;
}

static int default_free(const char *dir, uint64_t *free_bytes, void *arg) {
    (void)arg;
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return -errno;
    *free_bytes = (uint64_t)v.f_bavail * v.f_frsize;
    return 0;
}

// Every path must be a writable directory; the bytes needed on each filesystem (paths
// sharing one st_dev are summed) must fit its free space. Nothing is created here.
static int check_space(nvme_store_t *s, const nvme_store_opts_t *o, char *err, size_t errlen) {
    dev_t dev[IO_MAX_PATHS];
    for (int i = 0; i < s->npaths; i++) {
        struct stat st;
        if (stat(s->dirs[i], &st) != 0) {
            int e = errno;
            ERR("--nvme-path %s: %s (create the directory or point --nvme-path at an existing one)", s->dirs[i], strerror(e));
            return -e;
        }
        if (!S_ISDIR(st.st_mode)) {
            ERR("--nvme-path %s: not a directory (--nvme-path takes directories: DIR[,DIR...])", s->dirs[i]);
            return -ENOTDIR;
        }
        if (access(s->dirs[i], W_OK | X_OK) != 0) {
            int e = errno;
            ERR("--nvme-path %s: %s (the store's files are created there: pick a directory you can write)", s->dirs[i], strerror(e));
            return -e;
        }
        dev[i] = st.st_dev;
    }
    for (int i = 0; i < s->npaths; i++) {
        int first = 1, count = 0;
        for (int j = 0; j < i; j++) if (dev[j] == dev[i]) first = 0;
        if (!first) continue;
        char names[1024] = "";
        size_t used = 0;
        for (int j = i; j < s->npaths; j++) {
            if (dev[j] != dev[i]) continue;
            if (used < sizeof names) used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", count ? "," : "", s->dirs[j]);
            count++;
        }
        uint64_t need = (uint64_t)count * s->file_size, avail = 0;
        int rc;
        if (s->flags & IO_FLAG_FREE) { avail = s->fake_free; rc = 0; }
        else rc = o->free_bytes ? o->free_bytes(s->dirs[i], &avail, o->free_arg) : default_free(s->dirs[i], &avail, NULL);
        if (rc < 0) {
            ERR("--nvme-path %s: cannot read free space: %s", s->dirs[i], strerror(-rc));
            return rc;
        }
        if (need > avail) {
            char a[32], b[32];
            ERR("--nvme-path %s: needs %s, %s free%s (free space there, move fewer states to nvme, or add a "
                "directory on another drive: --nvme-path DIR,DIR2)", names, fmtb(a, sizeof a, need),
                fmtb(b, sizeof b, avail), count > 1 ? " on their one filesystem" : "");
            return -ENOSPC;
        }
    }
    return 0;
}

static const char *direct_hint =
    "the NVMe tier needs direct I/O: point --nvme-path at a directory on a local disk filesystem "
    "(ext4, xfs, btrfs), not tmpfs before Linux 6.6 or a network/FUSE filesystem";

// Opens one O_DIRECT file per directory, reserves file_size with fallocate, proves
// O_DIRECT with a 4 KiB write+read, and unlinks it unless keep.
static int create_files(nvme_store_t *s, char *err, size_t errlen) {
    int id = atomic_fetch_add(&store_counter, 1);
    void *probe = NULL;
    if (posix_memalign(&probe, IO_ALIGN, IO_ALIGN) != 0) return -ENOMEM;
    memset(probe, 0, IO_ALIGN);
    int rc = 0;
    for (int i = 0; i < s->npaths && rc == 0; i++) {
        char *path = NULL;
        if (asprintf(&path, "%s/tiertrain-%d-%d-%d.nvme", s->dirs[i], (int)getpid(), id, i) < 0) { rc = -ENOMEM; break; }
        s->files[i] = path;
        int fd;
        if (s->flags & IO_FLAG_NODIRECT) { fd = -1; errno = EINVAL; }
        else fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
        if (fd < 0) {
            int e = errno;
            if (e == EINVAL) ERR("--nvme-path %s: the filesystem refuses O_DIRECT (open: %s); %s", s->dirs[i], strerror(e), direct_hint);
            else ERR("--nvme-path %s: cannot create %s: %s", s->dirs[i], path, strerror(e));
            rc = -e;
            break;
        }
        s->fds[i] = fd;
        if (!s->keep) unlink(path); // gone from the namespace now; space held until close
        if (fallocate(fd, 0, 0, (off_t)s->file_size) != 0) {
            int e = errno;
            if (e == EOPNOTSUPP) {
                if (ftruncate(fd, (off_t)s->file_size) != 0) e = errno;
                else { io_notice(s, "--nvme-path %s: the filesystem cannot preallocate (fallocate unsupported); space is not reserved up front", s->dirs[i]); e = 0; }
            }
            if (e) {
                char a[32];
                ERR("--nvme-path %s: reserving %s for %s failed: %s%s", s->dirs[i], fmtb(a, sizeof a, s->file_size), path,
                    strerror(e), e == ENOSPC || e == EDQUOT ? " (free space there, move fewer states to nvme, or add a directory on another drive)" : "");
                rc = -e;
                break;
            }
        }
        ssize_t w = pwrite(fd, probe, IO_ALIGN, 0);
        ssize_t r = w == IO_ALIGN ? pread(fd, probe, IO_ALIGN, 0) : -1;
        if (w != IO_ALIGN || r != IO_ALIGN) {
            int e = (w < 0 || r < 0) ? errno : EIO;
            if (e == EINVAL) ERR("--nvme-path %s: the filesystem refuses O_DIRECT (4 KiB direct %s: %s); %s", s->dirs[i],
                                 w != IO_ALIGN ? "write" : "read", strerror(e), direct_hint);
            else ERR("--nvme-path %s: a 4 KiB direct %s to %s failed: %s", s->dirs[i], w != IO_ALIGN ? "write" : "read", path, strerror(e));
            rc = -e;
        }
    }
    free(probe);
    return rc;
}

int nvme_dir_direct_ok(const char *dir) {
    char *path = NULL;
    if (asprintf(&path, "%s/tiertrain-probe-%d-%d.nvme", dir, (int)getpid(), atomic_fetch_add(&store_counter, 1)) < 0) return -ENOMEM;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
    int rc = 0;
    if (fd < 0) rc = -errno;
    else {
        unlink(path);
        void *b = NULL;
        if (posix_memalign(&b, IO_ALIGN, IO_ALIGN) != 0) rc = -ENOMEM;
        else {
            memset(b, 0x5a, IO_ALIGN);
            if (pwrite(fd, b, IO_ALIGN, 0) != IO_ALIGN) rc = errno ? -errno : -EIO;
            else if (pread(fd, b, IO_ALIGN, 0) != IO_ALIGN) rc = errno ? -errno : -EIO;
            free(b);
        }
        close(fd);
    }
    free(path);
    return rc;
}

// ---------------------------------------------------------------- init / free

static void store_release(nvme_store_t *s) {
    for (int i = 0; i < s->npaths; i++) {
        if (s->fds[i] >= 0) close(s->fds[i]);
        free(s->dirs[i]);
        free(s->files[i]);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}

int nvme_store_init(nvme_store_t **out, const nvme_store_opts_t *o, char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = 0;
    nvme_store_t *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    for (int i = 0; i < IO_MAX_PATHS; i++) s->fds[i] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    s->block = o->block ? o->block : (1u << 20);
    s->qd = o->qd ? o->qd : 32;
    s->turn = 2 * (uint64_t)s->qd * s->block;
    s->lazy_cap = s->qd / IO_LAZY_SHARE > 1 ? (uint64_t)(s->qd / IO_LAZY_SHARE) : 1;
    s->size = ALIGN_UP(o->size, (uint64_t)IO_ALIGN);
    s->verify = o->verify;
    s->keep = o->keep;
    s->quiet = o->quiet;
    s->sqpoll_req = o->sqpoll;
    int rc = 0;
    char a[32];
    const char *spec = o->faults ? o->faults : getenv("TT_IO_FAULT");
    fault_spec_t fs;
    if (s->block % IO_ALIGN || s->block > (1u << 30)) {
        ERR("--io-block %s: must be a multiple of 4 KiB between 4 KiB and 1 GiB (e.g. 1M)", fmtb(a, sizeof a, s->block));
        rc = -EINVAL;
        goto fail;
    }
    if (s->qd < 1 || s->qd > 4096) {
        ERR("--nvme-qd %d: must be between 1 and 4096 (32 suits most NVMe drives)", s->qd);
        rc = -EINVAL;
        goto fail;
    }
    if (s->size == 0) {
        ERR("nvme store: size 0 (nothing placed on nvme needs no store)");
        rc = -EINVAL;
        goto fail;
    }
    if (o->nbufs < 0 || o->nbufs > IO_MAX_BUFS) {
        ERR("nvme store: %d buffers to register (at most %d)", o->nbufs, IO_MAX_BUFS);
        rc = -EINVAL;
        goto fail;
    }
    if ((rc = parse_faults(spec, 1, &fs, err, errlen)) != 0) goto fail;
    if (!o->faults && spec && *spec && !s->quiet) io_say("TT_IO_FAULT=%s: io fault injection armed", spec);
    memcpy(s->faults, fs.faults, sizeof fs.faults);
    s->nfaults = fs.nfaults;
    memcpy(s->slow_ms, fs.slow_ms, sizeof fs.slow_ms);
    s->flags = fs.flags;
    s->fake_free = fs.fake_free;
    s->nbufs = o->nbufs;
    for (int i = 0; i < o->nbufs; i++) s->bufs[i] = o->bufs[i];
    if ((rc = split_paths(s, o->paths, err, errlen)) != 0) goto fail;
    if (s->npaths == 1) s->file_size = s->size;
    else s->file_size = CEIL_DIV(CEIL_DIV(s->size, s->block), (uint64_t)s->npaths) * s->block;
    if ((rc = check_space(s, o, err, errlen)) != 0) goto fail;
    if ((rc = create_files(s, err, errlen)) != 0) goto fail;

    if (o->engine == IO_ENGINE_PSYNC) s->ops = &io_engine_psync;
    else {
        char uerr[512] = "";
        s->ops = &io_engine_uring;
        rc = s->ops->start(s, uerr, sizeof uerr);
        if (rc == 0) goto started;
        if (o->engine == IO_ENGINE_URING) { // a request this machine cannot grant: -ENODEV, as for a device
            ERR("--io-engine uring: %s (use --io-engine auto or psync)", uerr);
            s->ops = NULL;
            rc = -ENODEV;
            goto fail;
        }
        io_notice(s, "io_uring unavailable (%s); using the pread/pwrite thread pool instead (--io-engine psync)", uerr);
        s->ops = &io_engine_psync;
    }
    if ((rc = s->ops->start(s, err, errlen)) != 0) {
        s->ops = NULL;
        goto fail;
    }
started:
    *out = s;
    return 0;
fail:
    if (s->keep) for (int i = 0; i < s->npaths; i++) if (s->fds[i] >= 0 && s->files[i]) unlink(s->files[i]);
    store_release(s);
    return rc;
}

void nvme_store_free(nvme_store_t *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    while (s->inflight > 0) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (s->ops) s->ops->stop(s);
    store_release(s);
}

// ---------------------------------------------------------------- requests

int nvme_store_submit(nvme_store_t *s, io_ticket_t *t, const io_req_t *r) {
    int st = atomic_load_explicit(&t->state, memory_order_acquire);
    if (st == IO_TICKET_PENDING || st == IO_TICKET_WAITING) return -EBUSY;
    t->op = r->op;
    t->off = r->off;
    t->len = r->len;
    t->buf = r->buf;
    t->name = r->name;
    t->urgent = r->urgent;
    t->lazy = r->lazy && !r->urgent;
    t->res = 0;
    t->crc = r->crc;
    t->crc_read = 0;
    t->err_file = -1;
    t->err_foff = 0;
    t->why = NULL;
    t->store = s;
    t->cb = r->cb;
    t->cb_arg = r->cb_arg;
    t->qnext = NULL;
    t->next = r->off;
    const char *why = NULL;
    if (r->op != IO_READ && r->op != IO_WRITE) why = "unknown operation";
    else if (r->off % IO_ALIGN) why = "offset is not a multiple of 4096";
    else if (r->len == 0) why = "length is 0";
    else if (r->len % IO_ALIGN) why = "length is not a multiple of 4096";
    else if ((uintptr_t)r->buf % IO_ALIGN || !r->buf) why = "buffer is not 4096-byte aligned";
    else if (r->off > s->size || r->len > s->size - r->off) why = "extent runs past the end of the store";
    if (why) {
        t->res = -EINVAL;
        t->why = why;
        atomic_store_explicit(&t->state, IO_TICKET_DONE, memory_order_release);
        return -EINVAL;
    }
    if (s->verify && r->op == IO_WRITE) t->crc = crc32c(0, r->buf, r->len);
    atomic_store_explicit(&t->left, r->len, memory_order_relaxed);
    atomic_store_explicit(&t->err_set, 0, memory_order_relaxed);
    atomic_store_explicit(&t->state, IO_TICKET_PENDING, memory_order_relaxed);
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        atomic_store_explicit(&t->state, st, memory_order_relaxed);
        return -ESHUTDOWN;
    }
    t->qseq = ++s->qseq;
    // the link t goes in: after the tickets of its rank and the ranks before it (urgent,
    // plain, lazy: io_internal.h); a ticket partly dispatched resumes where it stopped once it
    // is the head again
    io_ticket_t **at = &s->qhead[t->op];
    if (t->lazy) at = s->qtail[t->op] ? &s->qtail[t->op]->qnext : at;
    else
        while (*at && (t->urgent ? (*at)->urgent : !(*at)->lazy)) at = &(*at)->qnext;
    t->qnext = *at;
    *at = t;
    if (!t->qnext) s->qtail[t->op] = t;
    s->inflight++;
    s->ops->kick(s); // under the lock: the engine cannot be stopped before it is woken
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(&s->st_requests, 1, memory_order_relaxed);
    return 0;
}

int nvme_store_read(nvme_store_t *s, io_ticket_t *t, uint64_t off, uint64_t len, void *buf, uint32_t crc) {
    io_req_t r = {.op = IO_READ, .off = off, .len = len, .buf = buf, .crc = crc};
    return nvme_store_submit(s, t, &r);
}

int nvme_store_write(nvme_store_t *s, io_ticket_t *t, uint64_t off, uint64_t len, const void *buf) {
    io_req_t r = {.op = IO_WRITE, .off = off, .len = len, .buf = (void *)buf};
    return nvme_store_submit(s, t, &r);
}

// The op whose piece goes to the device next (io_internal.h: turns), or -1: nothing is
// queued, or the turn's pieces drain before the other op's turn.
static int turn_op(nvme_store_t *s) {
    const int cur = s->turn_op, other = !cur;
    const int urged = s->qhead[other] && s->qhead[other]->urgent && !(s->qhead[cur] && s->qhead[cur]->urgent);
    if (s->qhead[cur] && !urged && (!s->qhead[other] || s->turn_bytes < s->turn)) return cur;
    if (!s->qhead[other] || s->op_pieces[cur]) return -1;
    s->turn_op = other;
    s->turn_bytes = 0;
    return other;
}

int io_queue_take(nvme_store_t *s, io_piece_t *p) {
    const int op = turn_op(s);
    if (op < 0) return 0;
    io_ticket_t *t = s->qhead[op];
    if (t->lazy && s->lazy_pieces >= s->lazy_cap) return 0; // one retiring kicks the engine again
    uint64_t end = t->off + t->len, at = t->next;
    uint64_t pe = end - at > s->block ? at + s->block : end;
    if (s->npaths > 1) {
        uint64_t boundary = (at / s->block + 1) * s->block;
        if (pe > boundary) pe = boundary;
    }
    memset(p, 0, sizeof *p);
    p->t = t;
    p->op = t->op;
    nvme_store_locate(s, at, &p->file, &p->foff);
    p->buf = (char *)t->buf + (at - t->off);
    p->len = (uint32_t)(pe - at);
    p->lazy = t->lazy;
    s->lazy_pieces += (uint64_t)t->lazy;
    // A ticket that already failed is not worth more I/O: its remaining pieces complete
    // without touching the device (the buffer is the caller's again sooner).
    p->skip = atomic_load_explicit(&t->err_set, memory_order_relaxed);
    if (!p->skip) {
        uint64_t sa = ++s->seq_all, so = ++s->seq_op[t->op];
        p->slow_ms = s->slow_ms[t->op];
        for (int i = 0; i < s->nfaults; i++) {
            io_fault_t *f = &s->faults[i];
            if (f->fired || !((f->op < 0 && f->k == sa) || (f->op == (int)t->op && f->k == so))) continue;
            f->fired = 1;
            p->fault = f->kind;
            p->fault_err = f->err;
            break;
        }
        atomic_fetch_add_explicit(&s->st_pieces[t->op], 1, memory_order_relaxed);
    }
    t->next = pe;
    if (pe == end) {
        s->qhead[op] = t->qnext;
        if (!s->qhead[op]) s->qtail[op] = NULL;
        t->qnext = NULL;
    }
    s->turn_bytes += p->len;
    if (s->op_pieces[op]++ == 0) s->op_since[op] = mono_ms();
    return 1;
}

static void ticket_finish(nvme_store_t *s, io_ticket_t *t) {
    if (t->res == 0 && s->verify && t->op == IO_READ) {
        t->crc_read = crc32c(0, t->buf, t->len);
        if (t->crc_read != t->crc) {
            t->res = -EBADMSG;
            t->why = "CRC32C mismatch";
            atomic_fetch_add_explicit(&s->st_errors, 1, memory_order_relaxed);
        }
    }
    io_ticket_cb cb = t->cb;
    if (cb) cb(t, t->cb_arg);
    // Release: res/crc/err_* written above (or by the failing piece, ordered before our
    // acq_rel fetch_sub on `left`) become visible to whoever acquires DONE.
    int old = atomic_exchange_explicit(&t->state, IO_TICKET_DONE, memory_order_acq_rel);
    // From here the waiter may reuse t; a wake on reused memory is at worst spurious.
    if (old == IO_TICKET_WAITING) futex(&t->state, FUTEX_WAKE_PRIVATE, INT_MAX);
    pthread_mutex_lock(&s->mu);
    if (--s->inflight == 0 && s->stopping) pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

// The device is done with one piece of op: its busy spell ends with the op's last piece,
// and when the other op waits, its turn can begin.
static void piece_retire(nvme_store_t *s, const io_piece_t *p) {
    const io_op_t op = p->op;
    pthread_mutex_lock(&s->mu);
    if (--s->op_pieces[op] == 0) {
        s->op_busy_ms[op] += mono_ms() - s->op_since[op];
        if (s->qhead[!op]) s->ops->kick(s);
    }
    // a lazy ticket at the head may have waited for this one (io_queue_take)
    if (p->lazy && s->lazy_pieces-- == s->lazy_cap && io_queue_has_work(s)) s->ops->kick(s);
    pthread_mutex_unlock(&s->mu);
}

void io_piece_done(nvme_store_t *s, io_piece_t *p, int res, uint64_t err_foff) {
    io_ticket_t *t = p->t;
    piece_retire(s, p);
    if (res < 0) {
        atomic_fetch_add_explicit(&s->st_errors, 1, memory_order_relaxed);
        int expect = 0;
        if (atomic_compare_exchange_strong(&t->err_set, &expect, 1)) {
            t->res = res;
            t->err_file = p->file;
            t->err_foff = err_foff;
        }
    } else if (!p->skip) {
        atomic_fetch_add_explicit(&s->st_bytes[p->op], p->len, memory_order_relaxed);
    }
    uint64_t prev = atomic_fetch_sub_explicit(&t->left, p->len, memory_order_acq_rel);
    if (prev == p->len) ticket_finish(s, t);
}

int io_ticket_wait(io_ticket_t *t) {
    int st = atomic_load_explicit(&t->state, memory_order_acquire);
    while (st == IO_TICKET_PENDING || st == IO_TICKET_WAITING) {
        if (st == IO_TICKET_PENDING &&
            !atomic_compare_exchange_weak_explicit(&t->state, &st, IO_TICKET_WAITING, memory_order_acquire, memory_order_acquire))
            continue; // st reloaded
        futex(&t->state, FUTEX_WAIT_PRIVATE, IO_TICKET_WAITING); // EAGAIN if it already changed
        st = atomic_load_explicit(&t->state, memory_order_acquire);
    }
    return t->res;
}

int io_ticket_poll(const io_ticket_t *t) {
    int st = atomic_load_explicit((_Atomic int *)&t->state, memory_order_acquire);
    return st == IO_TICKET_DONE || st == IO_TICKET_IDLE;
}

static const char *errno_hint(int e) {
    switch (e) {
    case EIO: return " (the device reported an error: check dmesg and the drive's health)";
    case ENOSPC: case EDQUOT: return " (the filesystem ran out of space despite the reservation: check quotas and other writers)";
    case EINVAL: return " (the kernel refused the request: the filesystem may not support O_DIRECT at this alignment)";
    case EROFS: return " (the filesystem went read-only: check dmesg)";
    default: return "";
    }
}

char *io_ticket_message(const io_ticket_t *t, char *buf, size_t len) {
    if (t->res == 0) {
        snprintf(buf, len, "ok");
        return buf;
    }
    char a[32], b[32];
    const char *op = t->op == IO_WRITE ? "write" : "read";
    char head[512];
    snprintf(head, sizeof head, "nvme %s%s%s%s (%s at store offset %" PRIu64 ")", op, t->name ? " of '" : "",
             t->name ? t->name : "", t->name ? "'" : "", fmtb(a, sizeof a, t->len), t->off);
    if (t->res == -EBADMSG && t->why) {
        snprintf(buf, len, "%s: %s: expected 0x%08x, read 0x%08x (the data changed on disk after it was written: "
                 "check the drive; --io-verify detected it)", head, t->why, t->crc, t->crc_read);
    } else if (t->why) {
        uint64_t size = t->store ? t->store->size : 0;
        snprintf(buf, len, "%s: refused before submission: %s (offset %" PRIu64 ", length %" PRIu64 ", buffer %p, store size %s; "
                 "extents must be 4 KiB-aligned in offset, length and buffer memory)", head, t->why, t->off, t->len, t->buf,
                 fmtb(b, sizeof b, size));
    } else if (t->err_file >= 0 && t->store) {
        snprintf(buf, len, "%s: %s offset %" PRIu64 ": %s%s", head, t->store->files[t->err_file], t->err_foff,
                 strerror(-t->res), errno_hint(-t->res));
    } else {
        snprintf(buf, len, "%s: %s", head, strerror(-t->res));
    }
    return buf;
}

// ---------------------------------------------------------------- introspection

void nvme_store_stats(const nvme_store_t *s, io_stats_t *o) {
    nvme_store_t *m = (nvme_store_t *)s;
    o->bytes_read = atomic_load(&m->st_bytes[IO_READ]);
    o->bytes_written = atomic_load(&m->st_bytes[IO_WRITE]);
    o->pieces_read = atomic_load(&m->st_pieces[IO_READ]);
    o->pieces_written = atomic_load(&m->st_pieces[IO_WRITE]);
    o->requests = atomic_load(&m->st_requests);
    o->retries = atomic_load(&m->st_retries);
    o->shorts = atomic_load(&m->st_shorts);
    o->errors = atomic_load(&m->st_errors);
    o->fixed = atomic_load(&m->st_fixed);
    pthread_mutex_lock(&m->mu); // a spell in progress counts up to now
    const double now = mono_ms();
    for (int op = 0; op < 2; op++)
        o->busy_ms[op] = m->op_busy_ms[op] + (m->op_pieces[op] ? now - m->op_since[op] : 0);
    pthread_mutex_unlock(&m->mu);
}

void nvme_store_info(const nvme_store_t *s, io_info_t *o) {
    memset(o, 0, sizeof *o);
    o->engine = s->ops ? s->ops->name : "none";
    o->registered_bufs = s->reg_bufs;
    o->registered_files = s->reg_files;
    o->sqpoll = s->sqpoll;
    o->npaths = s->npaths;
    o->size = s->size;
    o->file_size = s->file_size;
    o->block = s->block;
    o->qd = s->qd;
    o->verify = s->verify;
    o->notices = atomic_load(&((nvme_store_t *)s)->notices);
}

const char *nvme_store_file(const nvme_store_t *s, int i) {
    return i >= 0 && i < s->npaths ? s->files[i] : NULL;
}
