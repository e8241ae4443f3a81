/* The part of a C switch that outlives its pipelines: the lock, the statistics, the random
 * number generator and the queue of digests waiting for Python.
 *
 * One p4s_core per CSwitch, built in its own small object (core.c) so a switch exists before
 * any program is loaded. Each program's object (one per P4 program) is handed a pointer to it
 * and uses it through the inline functions below: both are compiled from this header, so they
 * agree on the layout.
 */
#ifndef P4S_CORE_H
#define P4S_CORE_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define P4S_MT_N 624
#define P4S_DIGEST_QUEUE_MAX (64u << 20)   /* bytes of digests waiting; more are dropped */

typedef struct p4s_stats {
    uint64_t rx, tx, dropped, malformed, errors;
} p4s_stats;

typedef struct p4s_core {
    pthread_mutex_t mu;             /* recursive: a packet, or a control-plane change */
    p4s_stats stats;
    uint32_t mt[P4S_MT_N];          /* CPython's MT19937, so seeded runs match the Python backend */
    uint32_t mt_index;
    /* Digests: records appended by pipelines, taken by Python. */
    pthread_mutex_t dmu;
    pthread_cond_t dcv;
    uint8_t *dbuf;
    uint32_t dused, dcap;
    uint64_t digests_lost;
    int shutdown;
    uint64_t clock_ns;              /* a fixed clock (tests), or 0: CLOCK_MONOTONIC */
} p4s_core;

/* The switch's clock: time.monotonic_ns()'s, as the Python backend reads it. */
static inline uint64_t p4s_clock_ns(const p4s_core *c) {
    if (c->clock_ns) return c->clock_ns;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One digest in the queue: the pipeline's generation, the digest's index in its program, and
 * its field values as 64-bit words (two, low first, for a field wider than 64 bits). */
typedef struct p4s_digest_rec {
    uint32_t gen, id, nwords, _pad;
    uint64_t words[];
} p4s_digest_rec;

/* CPython's genrand_uint32 (Modules/_randommodule.c). */
static inline uint32_t p4s_rand32(p4s_core *c) {
    static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
    uint32_t y;
    uint32_t *mt = c->mt;
    if (c->mt_index >= P4S_MT_N) {
        int kk;
        for (kk = 0; kk < P4S_MT_N - 397; kk++) {
            y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
            mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 0x1u];
        }
        for (; kk < P4S_MT_N - 1; kk++) {
            y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
            mt[kk] = mt[kk + (397 - P4S_MT_N)] ^ (y >> 1) ^ mag01[y & 0x1u];
        }
        y = (mt[P4S_MT_N - 1] & 0x80000000u) | (mt[0] & 0x7fffffffu);
        mt[P4S_MT_N - 1] = mt[396] ^ (y >> 1) ^ mag01[y & 0x1u];
        c->mt_index = 0;
    }
    y = mt[c->mt_index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

/* random.getrandbits(k), 1 <= k <= 128: 32-bit words, least significant first. */
static inline unsigned __int128 p4s_getrandbits(p4s_core *c, unsigned k) {
    if (k <= 32)
        return p4s_rand32(c) >> (32 - k);
    unsigned __int128 v = 0;
    for (unsigned shift = 0; k > 0; shift += 32) {
        uint32_t r = p4s_rand32(c);
        if (k < 32) {
            r >>= 32 - k;
            k = 0;
        } else {
            k -= 32;
        }
        v |= (unsigned __int128)r << shift;
    }
    return v;
}

/* random.randrange(0, n) for 0 < n < 2**127 (Random._randbelow_with_getrandbits). */
static inline unsigned __int128 p4s_randbelow(p4s_core *c, unsigned __int128 n) {
    unsigned k = 0;
    for (unsigned __int128 m = n; m; m >>= 1) k++;
    unsigned __int128 r = p4s_getrandbits(c, k);
    while (r >= n) r = p4s_getrandbits(c, k);
    return r;
}

/* Append a digest to the queue (the caller holds no lock but mu's). 0, or -1 if dropped. */
static inline int p4s_core_digest(p4s_core *c, const p4s_digest_rec *rec) {
    uint32_t size = (uint32_t)(sizeof *rec + rec->nwords * sizeof(uint64_t));
    int ok = 0;
    pthread_mutex_lock(&c->dmu);
    if (c->dused + size > c->dcap) {
        uint32_t cap = c->dcap ? c->dcap : 4096;
        while (cap < c->dused + size && cap < P4S_DIGEST_QUEUE_MAX) cap *= 2;
        uint8_t *b = cap >= c->dused + size ? (uint8_t *)realloc(c->dbuf, cap) : NULL;
        if (b == NULL) {
            c->digests_lost++;
            ok = -1;
        } else {
            c->dbuf = b;
            c->dcap = cap;
        }
    }
    if (ok == 0) {
        memcpy(c->dbuf + c->dused, rec, size);
        c->dused += size;
        pthread_cond_broadcast(&c->dcv);
    }
    pthread_mutex_unlock(&c->dmu);
    return ok;
}

#endif
