// worker.c — see worker.h.
#include "worker.h"

int worker_start_n(worker_t *w, int n, void *(*fn)(void *), void *const *args) {
    w->running = w->stop = w->nthreads = 0;
    if (n < 1 || n > WORKER_MAX) return 0;
    if (pthread_mutex_init(&w->mu, NULL) != 0) return 0;
    if (pthread_cond_init(&w->cv, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        return 0;
    }
    for (; w->nthreads < n; w->nthreads++)
        if (pthread_create(&w->thread[w->nthreads], NULL, fn, args[w->nthreads]) != 0) break;
    w->running = 1;
    if (w->nthreads == n) return 1;
    worker_stop(w); // the ones that started end at once: stop is set before they have work
    return 0;
}

int worker_start(worker_t *w, void *(*fn)(void *), void *arg) { return worker_start_n(w, 1, fn, &arg); }

void worker_stop(worker_t *w) {
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->nthreads; i++) pthread_join(w->thread[i], NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->running = 0;
}
