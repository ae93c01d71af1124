// testutil.c — see testutil.h.
#include "testutil.h"
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend.h" // uses: backend_blas_reexec

// Every suite runs the OpenBLAS kernels the binary runs: where OpenBLAS's own pick is narrower
// than this CPU, the binary runs itself again with a wider family (backend_blas_reexec), and so
// does each suite, before main, so that in-process results and the binary's agree bit for bit.
// (glibc hands an ELF constructor main's argc, argv and envp.)
__attribute__((constructor)) static void tu_blas_family(int argc, char **argv, char **envp) {
    (void)argc;
    (void)envp;
    backend_blas_reexec(argv);
}

static int close_impl(const char *what, const float *out, const double *refd, const float *reff,
                      size_t n, double atol, double rtol) {
    size_t bad = n, worst_i = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double r = refd ? refd[i] : (double)reff[i];
        double o = out[i];
        double err = fabs(o - r);
        int ok = !isnan(o) && !isnan(r) && err <= atol + rtol * fabs(r);
        if (isnan(o) || isnan(r)) err = INFINITY;
        if (!ok && bad == n) bad = i;
        if (err > worst) { worst = err; worst_i = i; }
    }
    if (bad == n) return 1;
    double rb = refd ? refd[bad] : reff[bad];
    double rw = refd ? refd[worst_i] : reff[worst_i];
    fprintf(stderr, "%s: mismatch at [%zu]: got %.9g want %.9g (atol %g rtol %g); worst |err| %.3g at [%zu] (got %.9g want %.9g)\n",
            what, bad, out[bad], rb, atol, rtol, worst, worst_i, out[worst_i], rw);
    return 0;
}

int tu_close(const char *what, const float *out, const double *ref, size_t n, double atol, double rtol) {
    return close_impl(what, out, ref, NULL, n, atol, rtol);
}

int tu_close_f(const char *what, const float *out, const float *ref, size_t n, double atol, double rtol) {
    return close_impl(what, out, NULL, ref, n, atol, rtol);
}

static char *slurp_fd(int fd) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    lseek(fd, 0, SEEK_SET);
    for (;;) {
        if (len == cap) { cap *= 2; buf = realloc(buf, cap + 1); }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    buf[len] = 0;
    return buf;
}

int tu_same_bits(const char *what, const float *out, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &out[i], sizeof a);
        memcpy(&b, &want[i], sizeof b);
        if (a != b) {
            fprintf(stderr, "%s: first difference at [%zu]: %.9g (0x%08x), want %.9g (0x%08x)\n", what, i, out[i], a,
                    want[i], b);
            return 0;
        }
    }
    return 1;
}

int tu_run(char *const argv[], char *const env[], char **out, char **err) {
    char tmpl_o[] = "/tmp/tt_out_XXXXXX", tmpl_e[] = "/tmp/tt_err_XXXXXX";
    int fo = mkstemp(tmpl_o), fe = mkstemp(tmpl_e);
    if (fo < 0 || fe < 0) return -1;
    unlink(tmpl_o);
    unlink(tmpl_e);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        for (int i = 0; env && env[i]; i++) putenv(env[i]);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (out) *out = slurp_fd(fo);
    if (err) *err = slurp_fd(fe);
    close(fo);
    close(fe);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

const char *tu_binary(void) {
    const char *b = getenv("TT_BINARY");
    return b ? b : TT_BINARY;
}

char *tu_tmpdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    char *path = NULL;
    if (asprintf(&path, "%s/tt_%s_XXXXXX", base ? base : "/tmp", tag) < 0) return NULL;
    if (!mkdtemp(path)) { free(path); return NULL; }
    return path;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) == 0) return 0;
    fprintf(stderr, "tu_rm_rf: %s: %s\n", path, strerror(errno));
    return -1;
}

int tu_rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int tu_sanitized(void) { return getenv("TT_SANITIZED") != NULL; }

char *tu_slurp(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    char *s = slurp_fd(fd);
    close(fd);
    return s;
}

static int cap_fd = -1, cap_saved = -1;

void tu_stderr_begin(void) {
    char tmpl[] = "/tmp/tt_cap_XXXXXX";
    fflush(stderr);
    cap_fd = mkstemp(tmpl);
    if (cap_fd < 0) { perror("tu_stderr_begin"); abort(); }
    unlink(tmpl);
    cap_saved = dup(2);
    dup2(cap_fd, 2);
}

char *tu_stderr_end(void) {
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    char *s = slurp_fd(cap_fd);
    close(cap_fd);
    cap_fd = cap_saved = -1;
    return s;
}
