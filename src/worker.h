// worker.h — a helper thread (or a few, sharing one lock) with its lock and condition
// variable: the shape the safetensors writer, the hasher and the checkpoint load's
// read-ahead lanes share. The owner and its threads talk through fields of the owner's,
// guarded by mu, waiting on cv; stop (under mu) asks the threads to end once they have
// nothing left to do.
//
// What it does not do: decide what the thread does, or when the owner waits for it.
// Who calls it: safetensors_write.c, hasher.c, ahead.c (each says what mu guards).
#pragma once
#include <pthread.h>

#define WORKER_MAX 4 // threads of one worker_t

typedef struct {
    pthread_t thread[WORKER_MAX];
    int nthreads; // started (the owner's)
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running;  // started and not yet joined (the owner's)
    int stop;     // (mu) the owner asks the thread to end
} worker_t;

// Makes mu and cv, then starts fn(arg). 1 when the thread runs; 0 when any part failed,
// with nothing left to undo (the owner then does the work itself).
int worker_start(worker_t *w, void *(*fn)(void *), void *arg);
// The same with n (1..WORKER_MAX) threads sharing mu and cv, thread i running fn(args[i]).
// 1 when all n run; 0 when any part failed, the ones that had started stopped again (each
// thread must end, without working, when it finds stop set).
int worker_start_n(worker_t *w, int n, void *(*fn)(void *), void *const *args);
// Sets stop under mu, wakes the threads, joins them and destroys mu and cv. Nothing when not
// running.
void worker_stop(worker_t *w);
