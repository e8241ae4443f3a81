/* The switch core's functions that Python calls (see p4s_core.h). */
#include <errno.h>
#include <time.h>

#include "p4s_core.h"
#include "p4sim_pipeline.h"

/* A core seeded with `mt` (624 state words then the index, as random.Random.getstate()). */
p4s_core *p4s_core_new(const uint32_t *mt) {
    p4s_core *c = (p4s_core *)calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&c->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_mutex_init(&c->dmu, NULL);
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->dcv, &cattr);
    pthread_condattr_destroy(&cattr);
    memcpy(c->mt, mt, sizeof c->mt);
    c->mt_index = mt[P4S_MT_N];
    return c;
}

void p4s_core_free(p4s_core *c) {
    if (c == NULL) return;
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->dmu);
    pthread_cond_destroy(&c->dcv);
    free(c->dbuf);
    free(c);
}

void p4s_core_lock(p4s_core *c) { pthread_mutex_lock(&c->mu); }

void p4s_core_unlock(p4s_core *c) { pthread_mutex_unlock(&c->mu); }

/* The generator's state, 624 words then the index (for tests: it must follow CPython's). */
void p4s_core_rng_state(p4s_core *c, uint32_t *out) {
    pthread_mutex_lock(&c->mu);
    memcpy(out, c->mt, sizeof c->mt);
    out[P4S_MT_N] = c->mt_index;
    pthread_mutex_unlock(&c->mu);
}

/* Wait up to timeout_ms for digests; 1 if some are queued, 0 on timeout or shutdown. */
int p4s_digest_wait(p4s_core *c, int timeout_ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->dmu);
    while (c->dused == 0 && !c->shutdown) {
        if (pthread_cond_timedwait(&c->dcv, &c->dmu, &until) == ETIMEDOUT) break;
    }
    int ready = c->dused > 0 && !c->shutdown;
    pthread_mutex_unlock(&c->dmu);
    return ready;
}

/* Move up to `cap` bytes of whole digest records into `out`; returns the bytes moved. */
uint32_t p4s_digest_take(p4s_core *c, uint8_t *out, uint32_t cap) {
    pthread_mutex_lock(&c->dmu);
    uint32_t n = 0;
    while (n < c->dused) {
        const p4s_digest_rec *r = (const p4s_digest_rec *)(c->dbuf + n);
        uint32_t size = (uint32_t)(sizeof *r + r->nwords * sizeof(uint64_t));
        if (n + size > cap) break;
        n += size;
    }
    if (n) {
        memcpy(out, c->dbuf, n);
        memmove(c->dbuf, c->dbuf + n, c->dused - n);
        c->dused -= n;
    }
    pthread_mutex_unlock(&c->dmu);
    return n;
}

/* Wake every waiter for good: the switch is closing. */
void p4s_digest_shutdown(p4s_core *c) {
    pthread_mutex_lock(&c->dmu);
    c->shutdown = 1;
    pthread_cond_broadcast(&c->dcv);
    pthread_mutex_unlock(&c->dmu);
}

/* Fix the switch's clock at ns (0: the real clock again), for reproducible timestamps. */
void p4s_core_set_clock(p4s_core *c, uint64_t ns) { c->clock_ns = ns; }

const uint64_t *p4s_core_stats(p4s_core *c) { return &c->stats.rx; }

/* Free an outbuf's memory (its buffers grow in C). */
void p4s_outbuf_release(p4sim_outbuf *ob) { p4sim_outbuf_free(ob); }
