/* The runtime a generated pipeline compiles with: P4 arithmetic helpers, the packet cursor,
 * field-list packing, hashes and checksums, meters, table lookup, value sets, action profiles,
 * the replication engine's maps, and the program-independent part of a pipeline (p4s_pipe).
 *
 * Values: bit<W> and int<W> up to 64 bits are uint64_t / int64_t (int<W> sign-extended),
 * 65 to 128 bits unsigned/signed __int128; table keys and action data cross the C API as
 * 64-bit words, low word first.
 */
#ifndef P4S_H
#define P4S_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "p4s_core.h"
#include "p4sim_pipeline.h"

typedef unsigned __int128 u128;
typedef __int128 i128;

#define P4S_LIKELY(x) __builtin_expect(!!(x), 1)
#define P4S_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define P4S_U128(hi, lo) (((u128)(uint64_t)(hi) << 64) | (u128)(uint64_t)(lo))

/* ---- P4 arithmetic ------------------------------------------------------------------ */
static inline int64_t p4s_sext64(uint64_t v, unsigned w) {
    unsigned s = 64 - w;
    return (int64_t)(v << s) >> s;
}
static inline i128 p4s_sext128(u128 v, unsigned w) {
    unsigned s = 128 - w;
    return (i128)(v << s) >> s;
}
static inline uint64_t p4s_mask64(unsigned w) { return w >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << w) - 1); }
static inline u128 p4s_mask128(unsigned w) { return w >= 128 ? ~(u128)0 : (((u128)1 << w) - 1); }
/* A shift amount of any width as an unsigned int, saturated (every width is below 256). */
static inline unsigned p4s_amount(u128 b) { return b > 255 ? 255u : (unsigned)b; }

static inline uint64_t p4s_shl_u64(uint64_t a, unsigned b, unsigned w) {
    return b >= w ? 0 : (a << b) & p4s_mask64(w);
}
static inline int64_t p4s_shl_s64(int64_t a, unsigned b, unsigned w) {
    return b >= w ? 0 : p4s_sext64((uint64_t)a << b, w);
}
static inline u128 p4s_shl_u128(u128 a, unsigned b, unsigned w) {
    return b >= w ? 0 : (a << b) & p4s_mask128(w);
}
static inline i128 p4s_shl_s128(i128 a, unsigned b, unsigned w) {
    return b >= w ? 0 : p4s_sext128((u128)a << b, w);
}
static inline uint64_t p4s_shr_u64(uint64_t a, unsigned b) { return b >= 64 ? 0 : a >> b; }
static inline int64_t p4s_shr_s64(int64_t a, unsigned b) { return a >> (b >= 63 ? 63 : b); }
static inline u128 p4s_shr_u128(u128 a, unsigned b) { return b >= 128 ? 0 : a >> b; }
static inline i128 p4s_shr_s128(i128 a, unsigned b) { return a >> (b >= 127 ? 127 : b); }

static inline uint64_t p4s_sat_add_u64(uint64_t a, uint64_t b, unsigned w) {
    u128 s = (u128)a + b;
    return s > p4s_mask64(w) ? p4s_mask64(w) : (uint64_t)s;
}
static inline uint64_t p4s_sat_sub_u64(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
static inline int64_t p4s_sat_s64(i128 v, unsigned w) {
    i128 hi = ((i128)1 << (w - 1)) - 1, lo = -((i128)1 << (w - 1));
    return (int64_t)(v > hi ? hi : v < lo ? lo : v);
}
static inline u128 p4s_sat_add_u128(u128 a, u128 b, unsigned w) {
    u128 s;
    if (__builtin_add_overflow(a, b, &s) || s > p4s_mask128(w)) return p4s_mask128(w);
    return s;
}
static inline u128 p4s_sat_sub_u128(u128 a, u128 b) { return a > b ? a - b : 0; }
static inline i128 p4s_sat_add_s128(i128 a, i128 b, unsigned w) {
    i128 s, hi = (i128)(p4s_mask128(w - 1)), lo = -hi - 1;
    if (__builtin_add_overflow(a, b, &s)) return a < 0 ? lo : hi;
    return s > hi ? hi : s < lo ? lo : s;
}
static inline i128 p4s_sat_sub_s128(i128 a, i128 b, unsigned w) {
    i128 s, hi = (i128)(p4s_mask128(w - 1)), lo = -hi - 1;
    if (__builtin_sub_overflow(a, b, &s)) return a < 0 ? lo : hi;
    return s > hi ? hi : s < lo ? lo : s;
}

/* ---- the packet being parsed ------------------------------------------------------- */
typedef struct p4s_pkt {
    const uint8_t *data;
    uint32_t len, off;
} p4s_pkt;

/* Big-endian reads of 1 to 16 bytes. n is a constant where a header's field is extracted, and
 * gcc leaves the byte loop a loop: whole words get one load and a byte swap instead. */
static inline uint64_t p4s_be(const uint8_t *d, unsigned n) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t h;
    uint32_t w;
    uint64_t q;
    switch (n) {
    case 2: memcpy(&h, d, 2); return __builtin_bswap16(h);
    case 4: memcpy(&w, d, 4); return __builtin_bswap32(w);
    case 8: memcpy(&q, d, 8); return __builtin_bswap64(q);
    default: break;
    }
#endif
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v = (v << 8) | d[i];
    return v;
}
/* Big-endian writes of a whole 16, 32 or 64-bit field (the deparser's common case). */
static inline void p4s_put_be16(uint8_t *d, uint64_t v) {
    uint16_t x = (uint16_t)v;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap16(x);
#endif
    memcpy(d, &x, 2);
}
static inline void p4s_put_be32(uint8_t *d, uint64_t v) {
    uint32_t x = (uint32_t)v;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap32(x);
#endif
    memcpy(d, &x, 4);
}
static inline void p4s_put_be64(uint8_t *d, uint64_t v) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(d, &v, 8);
}
static inline u128 p4s_be128(const uint8_t *d, unsigned n) {
    u128 v = 0;
    for (unsigned i = 0; i < n; i++) v = (v << 8) | d[i];
    return v;
}

/* ---- field lists: bits packed MSB first, zero-padded to a whole byte ----------------- */
typedef struct p4s_bits {
    uint8_t *buf;
    uint32_t nbytes;
    uint32_t nacc;       /* pending bits in acc, < 8 */
    uint32_t acc;
    uint64_t nbits;
} p4s_bits;

static inline void p4s_bits_init(p4s_bits *b, uint8_t *buf) {
    b->buf = buf;
    b->nbytes = b->nacc = b->acc = 0;
    b->nbits = 0;
}
static inline void p4s_bits_put(p4s_bits *b, uint64_t v, unsigned w) {
    b->nbits += w;
    if (b->nacc == 0 && (w & 7) == 0) {
        for (unsigned s = w; s > 0; s -= 8) b->buf[b->nbytes++] = (uint8_t)(v >> (s - 8));
        return;
    }
    while (w > 0) {
        unsigned room = 8 - b->nacc;
        unsigned take = w < room ? w : room;
        uint32_t chunk = (uint32_t)(v >> (w - take)) & ((1u << take) - 1);
        b->acc = (b->acc << take) | chunk;
        b->nacc += take;
        w -= take;
        if (b->nacc == 8) {
            b->buf[b->nbytes++] = (uint8_t)b->acc;
            b->acc = b->nacc = 0;
        }
    }
}
static inline void p4s_bits_put128(p4s_bits *b, u128 v, unsigned w) {
    if (w > 64) {
        p4s_bits_put(b, (uint64_t)(v >> 64), w - 64);
        w = 64;
    }
    p4s_bits_put(b, (uint64_t)v, w);
}
static inline void p4s_bits_bytes(p4s_bits *b, const uint8_t *d, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) p4s_bits_put(b, d[i], 8);
}
/* The packed bytes' length, the last byte padded with zeros. */
static inline uint32_t p4s_bits_end(p4s_bits *b) {
    if (b->nacc) {
        b->buf[b->nbytes++] = (uint8_t)(b->acc << (8 - b->nacc));
        b->acc = b->nacc = 0;
    }
    return b->nbytes;
}

/* ---- hashes and checksums (algos.c), as BMv2 computes them --------------------------- */
enum {
    P4S_CRC32, P4S_CRC32_CUSTOM, P4S_CRC16, P4S_CRC16_CUSTOM, P4S_RANDOM, P4S_IDENTITY,
    P4S_CSUM16, P4S_XOR16
};
/* The hash of a then b (b: a checksum's payload, or nothing). */
uint64_t p4s_hash(p4s_core *core, int algo, const uint8_t *a, uint32_t na, const uint8_t *b, uint32_t nb);

/* ---- meters (RFC 2698, as state.Meter) ------------------------------------------------ */
typedef struct p4s_meter {
    double cir, pir, cburst, pburst, tc, tp, last;
    int32_t configured, _pad;
} p4s_meter;

int p4s_meter_execute(p4s_meter *m, uint64_t units);
double p4s_now_s(void);

/* ---- tables ---------------------------------------------------------------------------- */
enum { P4S_MK_EXACT, P4S_MK_LPM, P4S_MK_TERNARY, P4S_MK_RANGE, P4S_MK_OPTIONAL };
enum { P4S_MODE_EXACT, P4S_MODE_LPM, P4S_MODE_SCAN };

/* What Python reads and writes of an entry: its direct counter, last hit and direct meter. */
typedef struct p4s_direct {
    uint64_t packets, bytes, last_hit_ns;
    p4s_meter meter;
} p4s_direct;

typedef struct p4s_entry {
    p4s_direct d;
    int64_t priority;
    int64_t member, group;      /* of the table's action profile; -1 if none */
    uint64_t order;             /* insertion number: equal priorities keep insertion order */
    int32_t action;             /* program-wide action index; -1 for a profile's entry */
    uint32_t slot;
    uint64_t *args;
    uint64_t *val, *msk;        /* per key word; a range field: val low, msk high */
    uint64_t data[];
} p4s_entry;

typedef struct p4s_table_desc {
    uint32_t nfields, nkw, nargs;     /* match fields, their 64-bit words, most action data words */
    uint32_t mode, lpm_field;
    const uint8_t *kinds;             /* per field, P4S_MK_* */
    const uint16_t *widths;           /* per field, bits */
    int32_t default_action;
} p4s_table_desc;

typedef struct p4s_hmap {             /* open addressing, entries keyed by their val words */
    uint32_t cap, count, tombs, nkw;
    uint64_t *hashes;                 /* 0 empty, 1 deleted */
    p4s_entry **ents;
} p4s_hmap;

typedef struct p4s_lpm_bucket {
    uint32_t plen;
    uint64_t mask[2];                 /* of the lpm field's words */
    p4s_hmap map;
} p4s_lpm_bucket;

typedef struct p4s_table {
    const p4s_table_desc *desc;
    uint32_t kw_first[64], kw_count[64];  /* per field: its first key word and word count */
    p4s_entry **by_slot;
    uint32_t nslots;
    p4s_hmap exact;
    p4s_lpm_bucket *lpm;
    uint32_t nlpm;
    p4s_entry **scan;
    uint32_t nscan, capscan;
    int32_t default_action;
    uint64_t *default_args;
    uint64_t next_order;
} p4s_table;

p4s_entry *p4s_lookup(p4s_table *t, const uint64_t *key);

/* A parser value_set is a scan table whose entries are its members: any one matches. */
int p4s_vset_match(p4s_table *v, const uint64_t *key);

/* ---- maps by id: action profile members and groups, multicast groups, clone sessions -- */
typedef struct p4s_idmap {
    uint32_t cap, count, tombs;
    uint64_t *keys;
    uint8_t *state;                   /* 0 empty, 1 used, 2 deleted */
    void **vals;
} p4s_idmap;

void *p4s_idmap_get(const p4s_idmap *m, uint64_t key);

typedef struct p4s_member {
    int32_t action;
    uint32_t nargs;
    uint64_t args[];
} p4s_member;

typedef struct p4s_group {
    uint32_t n;
    uint64_t ids[];                   /* member ids in BMv2's member-handle order */
} p4s_group;

typedef struct p4s_profile {
    p4s_idmap members, groups;
} p4s_profile;

/* The member an entry of a profile's table runs; NULL for a group left empty. */
static inline p4s_member *p4s_profile_choose(p4s_profile *p, const p4s_entry *e, uint64_t h) {
    uint64_t id;
    if (e->group >= 0) {
        p4s_group *g = (p4s_group *)p4s_idmap_get(&p->groups, (uint64_t)e->group);
        if (g == NULL || g->n == 0) return NULL;
        id = g->ids[h % g->n];
    } else {
        id = (uint64_t)e->member;
    }
    return (p4s_member *)p4s_idmap_get(&p->members, id);
}

typedef struct p4s_replicas {
    uint32_t n;
    uint32_t packet_length_bytes;     /* a clone session's; 0 cuts nothing */
    uint32_t *ports, *rids;
} p4s_replicas;

/* ---- the program-independent part of a pipeline --------------------------------------- */
typedef struct p4s_regarray {
    void *cells;
    uint32_t size, width;
} p4s_regarray;

typedef struct p4s_counterarray {
    uint64_t *packets, *bytes;
    uint32_t size;
} p4s_counterarray;

typedef struct p4s_meterarray {
    p4s_meter *cells;
    uint32_t size;
    int bytes;                        /* a BYTES meter (else PACKETS) */
} p4s_meterarray;

/* Per packet pass: what the externs asked of the traffic manager (backends/python's PK). */
typedef struct p4s_pk {
    void *sm;
    uint64_t length;
    const uint8_t *payload;
    uint32_t payload_len;
    p4s_entry *entry;                 /* the hit of a table with a direct meter */
    int dirty;
    int clone_set;
    uint64_t clone_kind, clone_session;
    int64_t clone_fl;
    int resubmit_flag, recirculate_flag;
    int64_t resubmit_fl, recirculate_fl;
    uint64_t truncate;
} p4s_pk;

/* A packet waiting for another ingress pass (resubmit, recirculate). */
typedef struct p4s_job {
    uint8_t *data;
    uint32_t len, port, itype;
    int64_t fl;
    uint8_t meta[];                   /* the metadata when it was queued */
} p4s_job;

typedef struct p4s_pipe_desc {
    uint32_t ntables, nregisters, ncounters, nmeters, nvsets, nprofiles;
    const p4s_table_desc *tables;
    const uint32_t *reg_sizes, *reg_widths, *counter_sizes, *meter_sizes;
    const uint8_t *meter_bytes;
    const p4s_table_desc *vsets;
    const uint32_t *vset_sizes;
    uint32_t meta_size;
} p4s_pipe_desc;

typedef struct p4s_pipe {
    p4s_core *core;
    uint32_t gen;
    const p4s_pipe_desc *desc;
    p4s_table *tables;
    p4s_regarray *registers;
    p4s_counterarray *counters;
    p4s_meterarray *meters;
    p4s_table *vsets;
    p4s_profile *profiles;
    p4s_idmap mcast, clones;
    p4s_pk pk;
    int exiting;                      /* P4's exit: set until the pipeline's block returns */
    void *parse_jmp[5], *fault_jmp[5];
    uint64_t reject_code;
    const char *fault_msg;
    /* the deparser's output */
    uint8_t *dbuf;
    uint32_t dused, dcap;
    /* resubmitted and recirculated packets */
    p4s_job **jobs;
    uint32_t njobs, capjobs;
    p4s_job *cur_job;                 /* the one in its pass now */
    /* digests made in this pass, handed to the core when the block that made them ends */
    uint8_t *pend;
    uint32_t pused, pcap;
} p4s_pipe;

int p4s_pipe_init(p4s_pipe *p, p4s_core *core, uint32_t gen, const p4s_pipe_desc *desc);
void p4s_pipe_destroy(p4s_pipe *p);

/* The packet fails the program (division by zero, assert): it is dropped and counted. */
__attribute__((noreturn)) static inline void p4s_fault(p4s_pipe *p, const char *why) {
    p->fault_msg = why;
    __builtin_longjmp(p->fault_jmp, 1);
}
/* The parser stops with an error (parser_error := code). */
__attribute__((noreturn)) static inline void p4s_reject(p4s_pipe *p, uint64_t code) {
    p->reject_code = code;
    __builtin_longjmp(p->parse_jmp, 1);
}

/* lookahead<bit<W>>(): the next W bits, PacketTooShort past the end (w <= 64 / <= 128). */
static inline uint64_t p4s_peek64(p4s_pipe *p, const p4s_pkt *pkt, unsigned w) {
    unsigned n = (w + 7) >> 3;
    if (P4S_UNLIKELY(pkt->len - pkt->off < n)) p4s_reject(p, 1);
    return p4s_be(pkt->data + pkt->off, n) >> (n * 8 - w);
}
static inline u128 p4s_peek128(p4s_pipe *p, const p4s_pkt *pkt, unsigned w) {
    unsigned n = (w + 7) >> 3;
    if (P4S_UNLIKELY(pkt->len - pkt->off < n)) p4s_reject(p, 1);
    return p4s_be128(pkt->data + pkt->off, n) >> (n * 8 - w);
}
/* packet_in.advance(bits): ParserInvalidArgument unless whole bytes (BMv2's ParserOpAdvance
 * checks that first), then PacketTooShort past the end. */
static inline void p4s_advance(p4s_pipe *p, p4s_pkt *pkt, u128 bits) {
    if (P4S_UNLIKELY(bits & 7)) p4s_reject(p, 6);
    u128 n = bits >> 3;
    if (P4S_UNLIKELY(n > pkt->len - pkt->off)) p4s_reject(p, 1);
    pkt->off += (uint32_t)n;
}

static inline uint64_t p4s_div64(p4s_pipe *p, uint64_t a, uint64_t b) {
    if (P4S_UNLIKELY(b == 0)) p4s_fault(p, "division by zero");
    return a / b;
}
static inline uint64_t p4s_mod64(p4s_pipe *p, uint64_t a, uint64_t b) {
    if (P4S_UNLIKELY(b == 0)) p4s_fault(p, "division by zero");
    return a % b;
}
static inline u128 p4s_div128(p4s_pipe *p, u128 a, u128 b) {
    if (P4S_UNLIKELY(b == 0)) p4s_fault(p, "division by zero");
    return a / b;
}
static inline u128 p4s_mod128(p4s_pipe *p, u128 a, u128 b) {
    if (P4S_UNLIKELY(b == 0)) p4s_fault(p, "division by zero");
    return a % b;
}

/* random(lo, hi): Random.randint's number, a fault if hi < lo (randint raises ValueError). */
static inline i128 p4s_randint(p4s_pipe *p, i128 lo, i128 hi) {
    if (P4S_UNLIKELY(hi < lo)) p4s_fault(p, "random: empty range (hi < lo)");
    return lo + (i128)p4s_randbelow(p->core, (u128)(hi - lo) + 1);
}

/* A meter of an array: out-of-range indexes are GREEN, as state.MeterArray. */
static inline uint64_t p4s_meter_exec(p4s_meterarray *a, uint64_t index, uint64_t nbytes) {
    if (index >= a->size) return 0;
    return (uint64_t)p4s_meter_execute(&a->cells[index], a->bytes ? nbytes : 1);
}

static inline void p4s_pk_reset(p4s_pk *pk, void *sm, uint64_t length) {
    pk->sm = sm;
    pk->length = length;
    pk->entry = NULL;
    if (pk->dirty) {
        pk->clone_set = 0;
        pk->resubmit_flag = pk->recirculate_flag = 0;
        pk->clone_fl = pk->resubmit_fl = pk->recirculate_fl = -1;
        pk->truncate = 0;
        pk->dirty = 0;
    }
}

/* Room for n more bytes of deparser output. */
static inline uint8_t *p4s_emit_room(p4s_pipe *p, uint32_t n) {
    if (P4S_UNLIKELY(p->dused + n > p->dcap)) {
        uint32_t cap = p->dcap ? p->dcap : 1024;
        while (cap < p->dused + n) cap *= 2;
        uint8_t *b = (uint8_t *)realloc(p->dbuf, cap);
        if (b == NULL) p4s_fault(p, "out of memory");
        p->dbuf = b;
        p->dcap = cap;
    }
    uint8_t *at = p->dbuf + p->dused;
    p->dused += n;
    return at;
}

/* A digest of n words, kept until the block that made it ends. */
uint64_t *p4s_digest_begin(p4s_pipe *p, uint32_t id, uint32_t nwords);
void p4s_digests_commit(p4s_pipe *p);

/* Queue a packet made of bytes a then b for another ingress pass. */
void p4s_job_push(p4s_pipe *p, const uint8_t *a, uint32_t na, const uint8_t *b, uint32_t nb, uint32_t port,
                  uint32_t itype, int64_t fl, const void *meta);
void p4s_jobs_clear(p4s_pipe *p);

#endif
