// profile.c — the calibration profile behind profile.h: defaults, where it lives, reading it
// back (through json.h, strictly: every rate present and within its range, version 1) and
// writing it atomically. Does not measure anything (bench/bench_calibrate.c does) or print:
// problems go back as one line in err, without the "tiertrain: " prefix.
// Called by plan.c, train.c, bench/bench_calibrate.c.
#include "profile.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "json.h"
#include "util.h" // uses: path_dir, dir_fsync

#define PROFILE_VERSION 1
#define PROFILE_MAX_BYTES 65536 // a written profile is ~300 bytes; anything this big is not one
#define REMAKE "run tiertrain bench calibrate to remake it"

// The rates, by key, in file order: one table drives load, save and validation.
// Each has a range that any real machine is well inside, so that a rate from a hand-edited
// or corrupt file cannot make the plan's floor inf (1e-300 FLOP/s) or 0: the plan prints
// its times and writes them into JSON lines and logs, where inf is no number. Compute from
// a slow core (1e6 FLOP/s) to well beyond any one GPU (1e17); links and disks from 1 MB/s
// to 1e14 B/s (100 TB/s, beyond any HBM); an AdamW update reads and writes some 16 bytes
// and does a dozen FLOPs per parameter, so its rate lies between the other two (1e4 to
// 1e17 params/s: room for the tests that set it high to take the optimizer out of a plan).
typedef struct {
    const char *key;
    size_t off;
    double lo, hi;    // the accepted range, in unit
    const char *unit;
} rate_key_t;
#define FLOPS 1e6, 1e17, "FLOP/s"
#define BPS 1e6, 1e14, "B/s"
static const rate_key_t RATES[] = {
    {"gemm_flops", offsetof(profile_t, gemm_flops), FLOPS},
    {"h2d_Bps", offsetof(profile_t, h2d_Bps), BPS},
    {"d2h_Bps", offsetof(profile_t, d2h_Bps), BPS},
    {"nvme_read_Bps", offsetof(profile_t, nvme_read_Bps), BPS},
    {"nvme_write_Bps", offsetof(profile_t, nvme_write_Bps), BPS},
    {"adam_params_per_s", offsetof(profile_t, adam_params_per_s), 1e4, 1e17, "params/s"},
};
#define NRATES ((int)(sizeof RATES / sizeof RATES[0]))
// Rates a profile may lack (0 in profile_t: never measured, and the plan says what stands in).
static const rate_key_t OPT_RATES[] = {
    {"gemm_fp32_flops", offsetof(profile_t, gemm_fp32_flops), FLOPS},
    {"attn_flops", offsetof(profile_t, attn_flops), FLOPS},
    {"elem_Bps", offsetof(profile_t, elem_Bps), BPS},
    {"comm_Bps", offsetof(profile_t, comm_Bps), BPS},
};
#define NOPT ((int)(sizeof OPT_RATES / sizeof OPT_RATES[0]))
#undef FLOPS
#undef BPS

// x is a rate k accepts (NaN and inf are not).
static int rate_ok(const rate_key_t *k, double x) { return x >= k->lo && x <= k->hi; }

// "doc: key 'K' at byte N: TEXT is not a rate in UNIT (accepted: LO to HI)", -EINVAL.
static int rate_error(const json_t *root, const rate_key_t *k, char *err, size_t errlen) {
    const json_t *v = json_get(root, k->key);
    snprintf(err, errlen, "%s: key '%s' at byte %zu: %.40s is not a rate in %s (accepted: %g to %g)", root->doc, k->key,
             v->at, v->s, k->unit, k->lo, k->hi);
    return -EINVAL;
}

// The field of p a table entry names.
static double *rate_of(profile_t *p, const rate_key_t *k) { return (double *)((char *)p + k->off); }
static double rate_val(const profile_t *p, const rate_key_t *k) { return *(const double *)((const char *)p + k->off); }

void profile_defaults(profile_t *p) {
    memset(p, 0, sizeof *p);
    p->gemm_flops = 40e9;         // a 2-core AVX2 box through OpenBLAS, with room to spare
    p->h2d_Bps = 4e9;             // a memcpy on that box; well under any PCIe link
    p->d2h_Bps = 4e9;
    p->nvme_read_Bps = 0.5e9;     // a slow virtual disk
    p->nvme_write_Bps = 0.5e9;
    p->adam_params_per_s = 2e8;   // ~6 GB/s of memory at 30 B per parameter
    p->gemm_fp32_flops = 40e9;    // the same box: no BF16 units
    p->attn_flops = 20e9;         // half the matmuls' rate: the softmax between its products
    p->elem_Bps = 4e9;            // the copy rate above
    snprintf(p->backend, sizeof p->backend, "cpu");
    p->threads = 0;
    snprintf(p->source, sizeof p->source, "defaults");
    p->measured = 0;
}

// ---------------------------------------------------------------- where it lives

// Writes "<dir><rest>" into buf; "" when it does not fit (profile_load/save then refuse it).
static const char *join(char *buf, size_t len, const char *dir, const char *rest) {
    int n = snprintf(buf, len, "%s%s", dir, rest);
    if (n < 0 || (size_t)n >= len) buf[0] = 0;
    return buf;
}

const char *profile_path(const config_t *cfg, char *buf, size_t len) {
    if (len == 0) return buf;
    if (cfg && cfg->profile_path[0]) return join(buf, len, cfg->profile_path, "");
    // XDG Base Directory: a relative $XDG_CACHE_HOME is invalid and ignored.
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/') return join(buf, len, xdg, "/tiertrain/profile.json");
    const char *home = getenv("HOME");
    if (home && home[0]) return join(buf, len, home, "/.cache/tiertrain/profile.json");
    return join(buf, len, "./tiertrain-profile.json", "");
}

// ---------------------------------------------------------------- reading

// Reads the whole file (at most PROFILE_MAX_BYTES) into a malloc'd buffer.
static int slurp(const char *path, char **out, size_t *outlen, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); // (a FIFO must not wait for a writer)
    if (fd < 0) {
        int e = errno;
        if (e != ENOENT)
            snprintf(err, errlen, "profile %s: cannot open: %s (fix its permissions, or pass --profile FILE)", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "profile %s: cannot stat: %s", path, strerror(e));
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > PROFILE_MAX_BYTES) {
        int e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        snprintf(err, errlen, "profile %s: %s (%s)", path,
                 S_ISDIR(st.st_mode) ? "is a folder, not a file" : !S_ISREG(st.st_mode) ? "is not a regular file"
                                                                                        : "too large to be a profile",
                 S_ISREG(st.st_mode) ? REMAKE : "pass --profile FILE");
        close(fd);
        return -e;
    }
    size_t cap = (size_t)st.st_size, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        snprintf(err, errlen, "profile %s: out of memory", path);
        return -ENOMEM;
    }
    for (;;) {
        if (len == cap) { // the file grew since fstat: one more byte says so
            char extra;
            ssize_t r = read(fd, &extra, 1);
            if (r < 0 && errno == EINTR) continue;
            if (r != 0) {
                snprintf(err, errlen, "profile %s: changed while being read (%s)", path, REMAKE);
                free(buf);
                close(fd);
                return -EINVAL;
            }
            break;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            snprintf(err, errlen, "profile %s: read failed: %s", path, strerror(e));
            free(buf);
            close(fd);
            return -e;
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    *out = buf;
    *outlen = len;
    return 0;
}

// Fills p from the parsed document; 0 or -EINVAL with a message (without the remake hint).
static int from_json(profile_t *p, const json_t *root, char *err, size_t errlen) {
    int64_t version = 0, threads = 0;
    const char *s = NULL;
    int rc;
    if ((rc = json_get_int64(root, "version", INT64_MIN, INT64_MAX, &version, err, errlen)) != 0) return rc;
    if (version != PROFILE_VERSION) {
        const json_t *v = json_get(root, "version");
        snprintf(err, errlen, "%s: key 'version' at byte %zu: version %" PRId64 " is not one this tiertrain reads (accepted: %d)",
                 root->doc, v->at, version, PROFILE_VERSION);
        return -EINVAL;
    }
    for (int i = 0; i < NRATES; i++) {
        double x = 0;
        if ((rc = json_get_double(root, RATES[i].key, &x, err, errlen)) != 0) return rc;
        if (!rate_ok(&RATES[i], x)) return rate_error(root, &RATES[i], err, errlen);
        *rate_of(p, &RATES[i]) = x;
    }
    // The rest is optional, checked when present: the op rates and the ranks' link, and how
    // it was measured.
    for (int i = 0; i < NOPT; i++) {
        const json_t *v = json_get(root, OPT_RATES[i].key);
        double x = 0;
        *rate_of(p, &OPT_RATES[i]) = 0; // absent: never measured (not the defaults' guess)
        if (!v) continue;
        if ((rc = json_get_double(root, OPT_RATES[i].key, &x, err, errlen)) != 0) return rc;
        if (!rate_ok(&OPT_RATES[i], x)) return rate_error(root, &OPT_RATES[i], err, errlen);
        *rate_of(p, &OPT_RATES[i]) = x;
    }
    if (json_get(root, "backend")) {
        if ((rc = json_get_string(root, "backend", &s, err, errlen)) != 0) return rc;
        if (s[0] == 0 || strlen(s) >= sizeof p->backend) {
            snprintf(err, errlen, "%s: key 'backend' at byte %zu: \"%.40s\" is not a backend name (accepted: cpu, cuda)",
                     root->doc, json_get(root, "backend")->at, s);
            return -EINVAL;
        }
        snprintf(p->backend, sizeof p->backend, "%s", s);
    }
    if (json_get(root, "threads")) {
        if ((rc = json_get_int64(root, "threads", 0, 1 << 20, &threads, err, errlen)) != 0) return rc;
        p->threads = (int)threads;
    }
    if (json_get(root, "nvme_bytes")) {
        int64_t nb = 0;
        if ((rc = json_get_int64(root, "nvme_bytes", 0, INT64_MAX, &nb, err, errlen)) != 0) return rc;
        p->nvme_bytes = (uint64_t)nb;
    }
    if (json_get(root, "measured_at") && (rc = json_get_string(root, "measured_at", &s, err, errlen)) != 0) return rc;
    return 0;
}

int profile_load(profile_t *p, const char *path, char *err, size_t errlen) {
    profile_defaults(p);
    if (errlen) err[0] = 0;
    if (!path || !path[0]) {
        snprintf(err, errlen, "profile path is empty or too long ($XDG_CACHE_HOME or $HOME is too long): pass --profile FILE");
        return -ENAMETOOLONG;
    }
    char *buf = NULL;
    size_t len = 0;
    int rc = slurp(path, &buf, &len, err, errlen);
    if (rc) return rc;
    char doc[TT_PATH_MAX + 16]; // the document's name in json.h's messages; outlives the tree
    snprintf(doc, sizeof doc, "profile %s", path);
    json_limits_t lim = {.max_depth = 8, .max_bytes = PROFILE_MAX_BYTES, .max_values = 1024};
    json_t *root = NULL;
    char msg[1024];
    rc = json_parse(buf, len, doc, &lim, &root, msg, sizeof msg);
    if (rc == 0) rc = from_json(p, root, msg, sizeof msg);
    json_free(root);
    free(buf);
    if (rc) {
        snprintf(err, errlen, "%s (%s)", msg, REMAKE);
        profile_defaults(p);
        return rc;
    }
    snprintf(p->source, sizeof p->source, "%s", path);
    p->measured = 1;
    return 0;
}

// ---------------------------------------------------------------- writing

// mkdir -p of path's parent folder (0700, as XDG asks of cache folders it creates).
static int mkdir_parents(const char *path, char *err, size_t errlen) {
    char dir[TT_PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s", path);
    if (n < 0 || (size_t)n >= sizeof dir) {
        snprintf(err, errlen, "profile %.200s...: path too long (pass a shorter --profile)", path);
        return -ENAMETOOLONG;
    }
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0; // the current folder, or /
    *slash = 0;
    for (char *q = dir + 1;; q++) {
        if (*q != '/' && *q != 0) continue;
        char c = *q;
        *q = 0;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            snprintf(err, errlen, "profile %s: cannot create folder %s: %s (pass --profile FILE somewhere writable)", path, dir,
                     strerror(e));
            return -e;
        }
        *q = c;
        if (c == 0) break;
    }
    return 0;
}

int profile_writable(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISREG(st.st_mode)) return 0;
        snprintf(err, errlen, "profile %s: %s (pass --profile FILE)", path,
                 S_ISDIR(st.st_mode) ? "is a folder, not a file" : "is not a regular file");
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    if (errno == ENOTDIR) { // a folder on its way is a file
        snprintf(err, errlen, "profile %s: a folder in the path is a file (pass --profile FILE)", path);
        return -ENOTDIR;
    }
    return 0; // missing: profile_save creates it
}

// The file's text (profile_save has checked its rates): 0, or the backend name's write error.
static int write_json(FILE *f, const profile_t *p) {
    char when[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(f, "{\n  \"version\": %d,\n", PROFILE_VERSION);
    for (int i = 0; i < NRATES; i++) fprintf(f, "  \"%s\": %.17g,\n", RATES[i].key, rate_val(p, &RATES[i])); // %.17g: exact
    for (int i = 0; i < NOPT; i++) { // written when measured
        const double x = rate_val(p, &OPT_RATES[i]);
        if (x > 0 && isfinite(x)) fprintf(f, "  \"%s\": %.17g,\n", OPT_RATES[i].key, x);
    }
    fprintf(f, "  \"backend\": ");
    int rc = json_fput_string(f, p->backend[0] ? p->backend : "cpu");
    fprintf(f, ",\n  \"threads\": %d,\n", p->threads);
    if (p->nvme_bytes) fprintf(f, "  \"nvme_bytes\": %llu,\n", (unsigned long long)p->nvme_bytes);
    fprintf(f, "  \"measured_at\": \"%s\"\n}\n", when);
    return rc;
}

int profile_save(const profile_t *p, const char *path, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    if (!path || !path[0]) {
        snprintf(err, errlen, "profile path is empty or too long ($XDG_CACHE_HOME or $HOME is too long): pass --profile FILE");
        return -ENAMETOOLONG;
    }
    // what load would refuse is not written: a measurement that failed or went wrong says so
    // here, not in every run that reads the file (the optional rates: written when > 0)
    for (int i = 0; i < NRATES + NOPT; i++) {
        const rate_key_t *k = i < NRATES ? &RATES[i] : &OPT_RATES[i - NRATES];
        double x = rate_val(p, k);
        if (!rate_ok(k, x) && (i < NRATES || x > 0)) {
            snprintf(err, errlen, "profile %s: %s = %g is not a rate in %s (accepted: %g to %g; a measurement failed: "
                     "rerun tiertrain bench calibrate)", path, k->key, x, k->unit, k->lo, k->hi);
            return -EINVAL;
        }
    }
    if (p->threads < 0) {
        snprintf(err, errlen, "profile %s: threads = %d is negative (a bug in the caller)", path, p->threads);
        return -EINVAL;
    }
    int rc = profile_writable(path, err, errlen);
    if (rc == 0) rc = mkdir_parents(path, err, errlen);
    if (rc) return rc;

    char tmp[TT_PATH_MAX + 16], dir[TT_PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= sizeof tmp) {
        snprintf(err, errlen, "profile %.200s...: path too long (pass a shorter --profile)", path);
        return -ENAMETOOLONG;
    }
    int fd = mkstemp(tmp); // in the same folder, so rename is atomic
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "profile %s: cannot create %s: %s (pass --profile FILE somewhere writable)", path, tmp, strerror(e));
        return -e;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        snprintf(err, errlen, "profile %s: %s", path, strerror(e));
        return -e;
    }
    const char *step = "write";
    rc = write_json(f, p);
    if (rc == 0 && (fflush(f) != 0 || ferror(f))) rc = -(errno ? errno : EIO);
    if (rc == 0 && fchmod(fd, 0644) != 0) rc = -errno, step = "chmod";
    if (rc == 0 && fsync(fd) != 0) rc = -errno, step = "fsync";
    if (fclose(f) != 0 && rc == 0) rc = -(errno ? errno : EIO), step = "close";
    if (rc == 0 && rename(tmp, path) != 0) rc = -errno, step = "rename";
    if (rc) {
        unlink(tmp);
        snprintf(err, errlen, "profile %s: %s failed: %s (check the disk and the folder's permissions)", path, step, strerror(-rc));
        return rc;
    }
    // Make the rename itself durable: fsync the folder.
    path_dir(path, dir, sizeof dir);
    if ((rc = dir_fsync(dir)) != 0) {
        snprintf(err, errlen, "profile %s: fsync of folder %s failed: %s (the file is written but may not survive a crash)", path, dir,
                 strerror(-rc));
        return rc;
    }
    return 0;
}
