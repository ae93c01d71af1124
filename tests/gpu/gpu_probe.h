// gpu_probe.h — for the GPU test suites (tests/gpu/test_*.c, built with CUDA): whether a
// usable GPU exists, asked in a child process. Check forks every test and a CUDA context
// does not survive fork(), so the parent must never touch CUDA itself.
#pragma once
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cuda_probe.h"

// The number of usable GPUs (0 with the runtime's reason in why).
static int probe_in_child(char *why, size_t len) {
    // The parent must not touch CUDA (Check forks every test): ask in a child.
    int fd[2];
    if (pipe(fd) != 0) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        char msg[300];
        int n = cuda_probe_devices(msg + 4, sizeof msg - 4);
        memcpy(msg, &n, 4);
        ssize_t w = write(fd[1], msg, sizeof msg);
        _exit(w == (ssize_t)sizeof msg ? 0 : 1);
    }
    close(fd[1]);
    char msg[300];
    memset(msg, 0, sizeof msg);
    ssize_t got = 0, r;
    while (got < (ssize_t)sizeof msg && (r = read(fd[0], msg + got, sizeof msg - got)) > 0) got += r;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof msg) { snprintf(why, len, "the probe child failed"); return 0; }
    int n;
    memcpy(&n, msg, 4);
    msg[sizeof msg - 1] = 0;
    size_t m = strnlen(msg + 4, len - 1);
    memcpy(why, msg + 4, m);
    why[m] = 0;
    return n;
}
