// progress.h — one progress report for a long phase (NVMe state init, --init-from, checkpoint
// save and load, eval): bytes (or items) done of a total, the rate and the time left.
//   on a terminal (stderr is a TTY): one line rewritten in place with '\r', from 0.5 s into
//     the phase, at most every 0.2 s, ended with a newline when the phase ends;
//   otherwise: a plain line every 5 s (a phase shorter than that prints nothing);
//   with --quiet (progress_quiet(1)): nothing.
// Lines go to stderr, as "tiertrain: WHAT: 1.2 GiB of 4.0 GiB (30%), 850 MB/s, 3 s left".
// Not thread-safe: one phase at a time, advanced by one thread.
#pragma once
#include <stdint.h>

typedef struct {
    const char *what;     // the phase, e.g. "saving step-00000100"
    uint64_t total, done;
    int bytes;            // 1: done and total are bytes; 0: items (windows, shards)
    double t0, last;      // ms: the start, the last line
    int shown;            // a line is on the terminal without its newline yet
} progress_t;

void progress_quiet(int quiet);   // the faces set it from --quiet
void progress_begin(progress_t *p, const char *what, uint64_t total, int bytes);
void progress_add(progress_t *p, uint64_t n);
void progress_end(progress_t *p);
