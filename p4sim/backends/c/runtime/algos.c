/* v1model's hash and checksum algorithms over bytes, as p4sim/externs.py computes them (BMv2's),
 * and the two-rate three-colour meter of state.Meter. */
#include "p4s.h"

static uint16_t crc16_table[256];
static uint32_t crc32_table[256];

__attribute__((constructor)) static void p4s_tables_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c16 = b, c32 = b;
        for (int i = 0; i < 8; i++) {
            c16 = (c16 & 1) ? (c16 >> 1) ^ 0xA001u : c16 >> 1;
            c32 = (c32 & 1) ? (c32 >> 1) ^ 0xEDB88320u : c32 >> 1;
        }
        crc16_table[b] = (uint16_t)c16;
        crc32_table[b] = c32;
    }
}

/* Bytes of a then b, as one run. */
typedef struct two_runs {
    const uint8_t *a, *b;
    uint32_t na, nb;
} two_runs;

static inline uint32_t runs_len(const two_runs *r) { return r->na + r->nb; }
static inline uint8_t runs_at(const two_runs *r, uint32_t i) { return i < r->na ? r->a[i] : r->b[i - r->na]; }

/* CRC-16/ARC: BMv2's crc16. */
static uint64_t crc16(const two_runs *r) {
    uint32_t crc = 0;
    for (uint32_t i = 0; i < r->na; i++) crc = (crc >> 8) ^ crc16_table[(crc ^ r->a[i]) & 0xFF];
    for (uint32_t i = 0; i < r->nb; i++) crc = (crc >> 8) ^ crc16_table[(crc ^ r->b[i]) & 0xFF];
    return crc;
}

/* zlib's CRC-32: BMv2's crc32. */
static uint64_t crc32(const two_runs *r) {
    uint32_t crc = 0xFFFFFFFFu;
    for (uint32_t i = 0; i < r->na; i++) crc = (crc >> 8) ^ crc32_table[(crc ^ r->a[i]) & 0xFF];
    for (uint32_t i = 0; i < r->nb; i++) crc = (crc >> 8) ^ crc32_table[(crc ^ r->b[i]) & 0xFF];
    return crc ^ 0xFFFFFFFFu;
}

/* 16-bit words, big-endian, an odd last byte padded with zero. */
static inline uint32_t word_at(const two_runs *r, uint32_t i) {
    uint32_t n = runs_len(r);
    return ((uint32_t)runs_at(r, i) << 8) | (i + 1 < n ? runs_at(r, i + 1) : 0);
}

/* The Internet checksum: the ones' complement of the ones' complement sum (externs.csum16). */
static uint64_t csum16(const two_runs *r) {
    uint64_t sum = 0;
    int nonzero = 0;
    uint32_t n = runs_len(r);
    if (r->na % 2 == 0) {            /* the common case: word-aligned runs */
        for (uint32_t i = 0; i + 1 < r->na; i += 2) sum += ((uint32_t)r->a[i] << 8) | r->a[i + 1];
        for (uint32_t i = 0; i < r->nb; i += 2)
            sum += ((uint32_t)r->b[i] << 8) | (i + 1 < r->nb ? r->b[i + 1] : 0);
    } else {
        for (uint32_t i = 0; i < n; i += 2) sum += word_at(r, i);
    }
    nonzero = sum != 0;
    uint64_t total = sum % 0xFFFF;
    if (total == 0 && nonzero) total = 0xFFFF;
    return total ^ 0xFFFF;
}

static uint64_t xor16(const two_runs *r) {
    uint32_t out = 0, n = runs_len(r);
    for (uint32_t i = 0; i < n; i += 2) out ^= word_at(r, i);
    return out;
}

/* BMv2's identity: the first 8 bytes, big-endian. */
static uint64_t identity(const two_runs *r) {
    uint64_t v = 0;
    uint32_t n = runs_len(r);
    for (uint32_t i = 0; i < n && i < 8; i++) v = (v << 8) | runs_at(r, i);
    return v;
}

uint64_t p4s_hash(p4s_core *core, int algo, const uint8_t *a, uint32_t na, const uint8_t *b, uint32_t nb) {
    two_runs r = {a, b, na, nb};
    switch (algo) {
    case P4S_CRC32:
    case P4S_CRC32_CUSTOM:
        return crc32(&r);
    case P4S_CRC16:
    case P4S_CRC16_CUSTOM:
        return crc16(&r);
    case P4S_RANDOM:
        return p4s_rand32(core);
    case P4S_IDENTITY:
        return identity(&r);
    case P4S_CSUM16:
        return csum16(&r);
    default:
        return xor16(&r);
    }
}

double p4s_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* GREEN 0, YELLOW 1, RED 2; an unconfigured meter marks everything GREEN. */
int p4s_meter_execute(p4s_meter *m, uint64_t units) {
    if (!m->configured) return 0;
    double now = p4s_now_s();
    double elapsed = now - m->last;
    m->last = now;
    double tc = m->tc + elapsed * m->cir, tp = m->tp + elapsed * m->pir;
    m->tc = tc < m->cburst ? tc : m->cburst;
    m->tp = tp < m->pburst ? tp : m->pburst;
    double u = (double)units;
    if (m->tp < u) return 2;
    m->tp -= u;
    if (m->tc < u) return 1;
    m->tc -= u;
    return 0;
}
