// worker.c — see worker.h.
#include "worker.h"

int worker_start(worker_t *w, void *(*fn)(void *), void *arg) {
    w->running = w->stop = 0;
    if (pthread_mutex_init(&w->mu, NULL) != 0) return 0;
    if (pthread_cond_init(&w->cv, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        return 0;
    }
    if (pthread_create(&w->thread, NULL, fn, arg) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return 0;
    }
    return w->running = 1;
}

void worker_stop(worker_t *w) {
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->running = 0;
}
