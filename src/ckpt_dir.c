// ckpt_dir.c — the --save directory around the checkpoints (checkpoint.h, ckpt_dir.h): one
// writer at a time (flock on DIR/.lock), its complete step-NNNNNNNN folders (the newest, each
// one's bytes, the pruning to --keep-last), the leftovers of interrupted saves, and the bytes
// one checkpoint takes. Moved out of checkpoint.c, which writes, reads and verifies the
// folders themselves.
#include "ckpt_dir.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "checkpoint.h"
#include "util.h"

#define ERR(...) snprintf(err, errlen, __VA_ARGS__)

// Removes a checkpoint folder (flat: files only) or a temporary one. Best effort.
void ckpt_remove_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[TT_PATH_MAX + 300];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int cmp_name(const void *a, const void *b) { return strcmp(a, b); } // step_name_t elements

// A temporary name ends "-PID": the process that made it. Ours, or one no longer alive
// (ESRCH), may be removed; a live other one's (a save in progress) may not. Names without a
// pid are not ours to judge: left alone.
static int tmp_is_ours_or_dead(const char *name) {
    const char *dash = strrchr(name, '-');
    if (!dash || !dash[1] || strspn(dash + 1, "0123456789") != strlen(dash + 1) || strlen(dash + 1) > 9) return 0;
    pid_t pid = (pid_t)strtol(dash + 1, NULL, 10);
    if (pid == getpid()) return 1;
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

// Removes leftovers of interrupted saves (.tmp-*: this process's, or a dead one's) and all
// but the newest keep checkpoints.
typedef char step_name_t[16]; // "step-NNNNNNNN"

int ckpt_is_checkpoint(const char *dir, const char *name) {
    if (strncmp(name, "step-", 5) != 0 || strlen(name) != 13 || strspn(name + 5, "0123456789") != 8) return 0;
    char p[TT_PATH_MAX + 300];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return 0; // a link could lead the unlinks anywhere
    snprintf(p, sizeof p, "%s/%s/state.json", dir, name);
    return lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

// The complete checkpoints of dir (ckpt_is_checkpoint), oldest first: how many (at most
// cap), or 0 when dir cannot be read. A step-* entry of the user's never counts: pruning
// would delete it, and a name that is not 8 digits would sort as the newest and take a keep.
static int step_folders(const char *dir, step_name_t *names, int cap) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap)
        if (ckpt_is_checkpoint(dir, e->d_name)) // its name is 13 characters: "%.13s" tells the compiler so
            snprintf(names[n++], sizeof names[0], "%.13s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_name);
    return n;
}

enum { MAX_STEP_FOLDERS = 4096 };

void ckpt_prune(const char *dir, int keep, const char *keep_name) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[TT_PATH_MAX + 300];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".tmp-", 5) || !tmp_is_ours_or_dead(e->d_name)) continue; // a live save stays
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) ckpt_remove_folder(p);
        else unlink(p);
    }
    closedir(d);
    step_name_t *names = keep > 0 ? malloc(MAX_STEP_FOLDERS * sizeof *names) : NULL;
    int n = names ? step_folders(dir, names, MAX_STEP_FOLDERS) : 0;
    for (int i = 0; i < n - keep; i++) {
        if (!strcmp(names[i], keep_name)) continue;
        // out of sight in one rename first: a crash in the middle of the unlinks must not
        // leave a visible step-* folder with files missing
        char gone[TT_PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        snprintf(gone, sizeof gone, "%s/.tmp-gone-%s-%d", dir, names[i], (int)getpid());
        if (rename(p, gone) == 0) ckpt_remove_folder(gone);
    }
    free(names);
}

// ---------------------------------------------------------------- one writer, space

int checkpoint_lock(const char *dir, char *err, size_t errlen) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        ERR("--save %s: cannot create it: %s (give a directory whose parent exists and is writable)", dir, strerror(e));
        return -e;
    }
    char path[TT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        ERR("--save %s: cannot open %s: %s", dir, path, strerror(e));
        return -e;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, pid, sizeof pid - 1, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK) {
            ERR("--save %s: cannot lock %s: %s", dir, path, strerror(e));
            return -e;
        }
        pid[n > 0 ? n : 0] = 0;
        pid[strspn(pid, "0123456789")] = 0;
        ERR("--save %s is in use by pid %s (another run saves there: give this run another --save, or wait for that "
            "one to finish)", dir, pid[0] ? pid : "unknown");
        return -EBUSY;
    }
    char line[32];
    int k = snprintf(line, sizeof line, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)k, 0) != k) {
        int e = errno;
        close(fd);
        ERR("--save %s: cannot write %s: %s", dir, path, strerror(e));
        return -e;
    }
    return fd;
}

int checkpoint_newest(const char *dir, char *out, size_t len) {
    char e[256];
    if (!dir[0]) return -ENOENT;
    if (checkpoint_resolve(dir, out, len, e, sizeof e) == 0) return 0;
    // no latest (a kill between a folder's rename and latest's write): the highest step folder
    step_name_t *names = malloc(MAX_STEP_FOLDERS * sizeof *names);
    const int n = names ? step_folders(dir, names, MAX_STEP_FOLDERS) : 0;
    const int w = n > 0 ? snprintf(out, len, "%s/%s", dir, names[n - 1]) : -1;
    free(names);
    return w > 0 && (size_t)w < len ? 1 : -ENOENT;
}

uint64_t checkpoint_bytes(const model_t *m, int bf16) {
    const uint64_t block = 4096;
    uint64_t data = 0, header = 64;
    for (int s = 0; s < m->nshards; s++)
        for (int t = 0; t < m->shards[s].ntensors; t++) {
            char hf[200];
            model_tensor_hf_name(m, s, t, hf, sizeof hf);
            data += (uint64_t)m->shards[s].tensors[t].numel;
            if (m->shards[s].tensors[t].row0 == 0) // a cut tensor's pieces are one entry
                header += 2 * strlen(hf) + 120;    // the entry and its crc32c entry, with suffixes
        }
    uint64_t model = 8 + header + data * (bf16 ? 2 : 4), optim = 8 + header * 3 + data * (bf16 ? 12 : 8);
    uint64_t files = (model + block - 1) / block + (optim + block - 1) / block + 2 /* the two .json */;
    return files * block;
}

// Bytes on disk of a flat folder's files.
static uint64_t folder_bytes(const char *dir) {
    DIR *d = opendir(dir);
    uint64_t total = 0;
    if (!d) return 0;
    struct dirent *e;
    char p[TT_PATH_MAX + 600];
    struct stat st;
    while ((e = readdir(d))) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && lstat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return total;
}

int checkpoint_existing(const char *dir, uint64_t *sizes, int cap) {
    step_name_t *names = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *names);
    int n = names ? step_folders(dir, names, cap) : 0;
    char p[TT_PATH_MAX + 300];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        sizes[i] = folder_bytes(p);
    }
    free(names);
    return n;
}
