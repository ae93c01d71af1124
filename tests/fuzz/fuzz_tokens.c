// fuzz_tokens.c — libFuzzer target for the token-file reader in data.c, through its public
// API: the input is written to a file and opened with data_open as an llm.c .bin (vocab
// 65536, 1000, and 2^24: the largest, which takes the tokens of any uint32 file that fits)
// and as raw text. data_open reports bad input as -errno plus one line (it never exits), so
// a rejection must be exactly that; an accepted file must give batches whose tokens are all
// < V, with targets shifted by one, and splits that add up to the file.
// Built by tests/fuzz/run.sh (`make fuzz`; CTest's test_fuzz_replay runs its corpus once), not by CMake.
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config.h"
#include "data.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)
enum { B = 2, T = 8 };

static char dir[64], bin_path[96], txt_path[96];
static config_t cfg; // large (paths): static

static void put_file(const char *path, const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        CHECK(w > 0);
        done += (size_t)w;
    }
    CHECK(close(fd) == 0);
}

static void try_open(const char *path, int V, size_t expect_tokens) {
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.data, sizeof cfg.data, "%s", path);
    cfg.V = V;
    cfg.B = B;
    cfg.T = T;
    cfg.seed = 1;
    data_t *d = NULL;
    char err[8192] = "";
    int rc = data_open(&d, &cfg, err, sizeof err);
    if (rc) {
        CHECK(rc < 0 && d == NULL);
        CHECK(err[0] && !strchr(err, '\n') && strstr(err, path));
        return;
    }
    CHECK(d);
    size_t ntrain = data_tokens(d, DATA_TRAIN), nval = data_tokens(d, DATA_VAL);
    CHECK(ntrain >= B * T + 1 && nval >= B * T + 1);
    if (expect_tokens != (size_t)-1) CHECK(ntrain + nval == expect_tokens);
    int x[B * T], y[B * T];
    for (int step = 0; step < 6; step++) {
        int split = step % 2;
        data_next(d, split, x, y);
        for (int i = 0; i < B * T; i++) {
            CHECK(x[i] >= 0 && x[i] < V && y[i] >= 0 && y[i] < V);
            if (i + 1 < B * T) CHECK(y[i] == x[i + 1]);
        }
    }
    data_rewind(d, DATA_TRAIN);
    CHECK(data_describe(d)[0]);
    data_free(d);
}

static void cleanup(void) {
    unlink(bin_path);
    unlink(txt_path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        // tmpfs when there is one: on ext4, truncate-then-close forces a writeback per input.
        snprintf(dir, sizeof dir, "/dev/shm/fuzz_tokens_XXXXXX");
        if (!mkdtemp(dir)) {
            snprintf(dir, sizeof dir, "/tmp/fuzz_tokens_XXXXXX");
            CHECK(mkdtemp(dir));
        }
        snprintf(bin_path, sizeof bin_path, "%s/in.bin", dir);
        snprintf(txt_path, sizeof txt_path, "%s/in.txt", dir);
        atexit(cleanup);
    }
    put_file(bin_path, data, size);
    // The header's count, when there is a header: an accepted file holds exactly that many.
    size_t count = (size_t)-1;
    if (size >= 12) {
        int32_t h2;
        memcpy(&h2, data + 8, 4);
        count = (size_t)(uint32_t)h2;
    }
    try_open(bin_path, 65536, count);
    try_open(bin_path, 1000, count);
    try_open(bin_path, 1 << 24, count);
    put_file(txt_path, data, size);
    try_open(txt_path, 256, size);
    return 0;
}
