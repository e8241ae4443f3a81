/* Table lookup as state.TableState does it (exact: one hash map; exact keys and one lpm key: a
 * map per prefix length, longest first; the rest: entries scanned by falling priority, the
 * earlier of equals first), value sets, maps by id, and a pipeline's storage. */
#include "p4s.h"

/* ---- hash maps of entries, keyed by their val words ---------------------------------- */
static inline uint64_t hash_words(const uint64_t *w, uint32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    h ^= h >> 29;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 32;
    return h < 2 ? h + 2 : h;
}

static inline int words_eq(const uint64_t *a, const uint64_t *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static p4s_entry *hmap_get(const p4s_hmap *m, const uint64_t *key) {
    if (m->count == 0) return NULL;
    uint64_t h = hash_words(key, m->nkw);
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        uint64_t s = m->hashes[i];
        if (s == 0) return NULL;
        if (s == h && words_eq(m->ents[i]->val, key, m->nkw)) return m->ents[i];
    }
}

static int hmap_resize(p4s_hmap *m, uint32_t cap) {
    uint64_t *hashes = (uint64_t *)calloc(cap, sizeof *hashes);
    p4s_entry **ents = (p4s_entry **)calloc(cap, sizeof *ents);
    if (hashes == NULL || ents == NULL) {
        free(hashes);
        free(ents);
        return -1;
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->hashes[i] < 2) continue;
        uint32_t j = (uint32_t)m->hashes[i] & (cap - 1);
        while (hashes[j]) j = (j + 1) & (cap - 1);
        hashes[j] = m->hashes[i];
        ents[j] = m->ents[i];
    }
    free(m->hashes);
    free(m->ents);
    m->hashes = hashes;
    m->ents = ents;
    m->cap = cap;
    m->tombs = 0;
    return 0;
}

static int hmap_put(p4s_hmap *m, p4s_entry *e) {
    if ((m->count + m->tombs + 1) * 4 > m->cap * 3) {
        uint32_t cap = m->cap ? m->cap : 8;
        while ((m->count + 1) * 2 > cap) cap *= 2;
        if (hmap_resize(m, cap) < 0) return -1;
    }
    uint64_t h = hash_words(e->val, m->nkw);
    uint32_t mask = m->cap - 1, i = (uint32_t)h & mask;
    while (m->hashes[i] >= 2) i = (i + 1) & mask;
    if (m->hashes[i] == 1) m->tombs--;
    m->hashes[i] = h;
    m->ents[i] = e;
    m->count++;
    return 0;
}

static void hmap_del(p4s_hmap *m, const p4s_entry *e) {
    if (m->count == 0) return;
    uint64_t h = hash_words(e->val, m->nkw);
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)h & mask; m->hashes[i]; i = (i + 1) & mask) {
        if (m->ents[i] == e && m->hashes[i] >= 2) {
            m->hashes[i] = 1;
            m->ents[i] = NULL;
            m->count--;
            m->tombs++;
            return;
        }
    }
}

static void hmap_free(p4s_hmap *m) {
    free(m->hashes);
    free(m->ents);
    memset(m, 0, sizeof *m);
}

/* ---- maps by id ----------------------------------------------------------------------- */
static inline uint32_t id_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

void *p4s_idmap_get(const p4s_idmap *m, uint64_t key) {
    if (m->count == 0) return NULL;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = id_hash(key) & mask; m->state[i]; i = (i + 1) & mask)
        if (m->state[i] == 1 && m->keys[i] == key) return m->vals[i];
    return NULL;
}

static int idmap_resize(p4s_idmap *m, uint32_t cap) {
    uint64_t *keys = (uint64_t *)calloc(cap, sizeof *keys);
    uint8_t *state = (uint8_t *)calloc(cap, 1);
    void **vals = (void **)calloc(cap, sizeof *vals);
    if (keys == NULL || state == NULL || vals == NULL) {
        free(keys);
        free(state);
        free(vals);
        return -1;
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->state[i] != 1) continue;
        uint32_t j = id_hash(m->keys[i]) & (cap - 1);
        while (state[j]) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        state[j] = 1;
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->state);
    free(m->vals);
    m->keys = keys;
    m->state = state;
    m->vals = vals;
    m->cap = cap;
    m->tombs = 0;
    return 0;
}

/* Put val under key (NULL: remove); the value it replaced or removed, for the caller to free. */
static int idmap_set(p4s_idmap *m, uint64_t key, void *val, void **old) {
    *old = NULL;
    if (m->cap) {
        uint32_t mask = m->cap - 1;
        for (uint32_t i = id_hash(key) & mask; m->state[i]; i = (i + 1) & mask) {
            if (m->state[i] == 1 && m->keys[i] == key) {
                *old = m->vals[i];
                if (val != NULL) {
                    m->vals[i] = val;
                } else {
                    m->state[i] = 2;
                    m->vals[i] = NULL;
                    m->count--;
                    m->tombs++;
                }
                return 0;
            }
        }
    }
    if (val == NULL) return 0;
    if ((m->count + m->tombs + 1) * 4 > m->cap * 3) {
        uint32_t cap = m->cap ? m->cap : 8;
        while ((m->count + 1) * 2 > cap) cap *= 2;
        if (idmap_resize(m, cap) < 0) return -1;
    }
    uint32_t mask = m->cap - 1, i = id_hash(key) & mask;
    while (m->state[i] == 1) i = (i + 1) & mask;
    if (m->state[i] == 2) m->tombs--;
    m->keys[i] = key;
    m->state[i] = 1;
    m->vals[i] = val;
    m->count++;
    return 0;
}

static void idmap_free(p4s_idmap *m) {
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->state[i] == 1) free(m->vals[i]);
    free(m->keys);
    free(m->state);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- tables ------------------------------------------------------------------------------ */
static int table_init(p4s_table *t, const p4s_table_desc *d) {
    memset(t, 0, sizeof *t);
    t->desc = d;
    uint32_t w = 0;
    for (uint32_t f = 0; f < d->nfields && f < 64; f++) {
        t->kw_first[f] = w;
        t->kw_count[f] = d->widths[f] > 64 ? 2 : 1;
        w += t->kw_count[f];
    }
    t->exact.nkw = d->nkw;
    t->default_action = d->default_action;
    t->default_args = (uint64_t *)calloc(d->nargs ? d->nargs : 1, sizeof(uint64_t));
    return t->default_args ? 0 : -1;
}

static void table_destroy(p4s_table *t) {
    for (uint32_t i = 0; i < t->nslots; i++) free(t->by_slot[i]);
    free(t->by_slot);
    hmap_free(&t->exact);
    for (uint32_t i = 0; i < t->nlpm; i++) hmap_free(&t->lpm[i].map);
    free(t->lpm);
    free(t->scan);
    free(t->default_args);
    memset(t, 0, sizeof *t);
}

static inline int scan_matches(const p4s_table *t, const p4s_entry *e, const uint64_t *key) {
    const p4s_table_desc *d = t->desc;
    for (uint32_t f = 0; f < d->nfields; f++) {
        uint32_t w = t->kw_first[f];
        if (d->kinds[f] == P4S_MK_RANGE) {
            if (t->kw_count[f] == 1) {
                if (key[w] < e->val[w] || key[w] > e->msk[w]) return 0;
            } else {
                u128 k = P4S_U128(key[w + 1], key[w]);
                if (k < P4S_U128(e->val[w + 1], e->val[w]) || k > P4S_U128(e->msk[w + 1], e->msk[w])) return 0;
            }
        } else {
            for (uint32_t i = w; i < w + t->kw_count[f]; i++)
                if ((key[i] & e->msk[i]) != e->val[i]) return 0;
        }
    }
    return 1;
}

p4s_entry *p4s_lookup(p4s_table *t, const uint64_t *key) {
    const p4s_table_desc *d = t->desc;
    if (d->mode == P4S_MODE_EXACT) return hmap_get(&t->exact, key);
    if (d->mode == P4S_MODE_LPM) {
        uint64_t k[128];
        uint32_t w = t->kw_first[d->lpm_field], n = t->kw_count[d->lpm_field];
        memcpy(k, key, d->nkw * sizeof *k);
        for (uint32_t b = 0; b < t->nlpm; b++) {
            for (uint32_t i = 0; i < n; i++) k[w + i] = key[w + i] & t->lpm[b].mask[i];
            p4s_entry *e = hmap_get(&t->lpm[b].map, k);
            if (e != NULL) return e;
        }
        return NULL;
    }
    for (uint32_t i = 0; i < t->nscan; i++)
        if (scan_matches(t, t->scan[i], key)) return t->scan[i];
    return NULL;
}

int p4s_vset_match(p4s_table *v, const uint64_t *key) { return p4s_lookup(v, key) != NULL; }

static uint32_t lpm_plen(const p4s_table *t, const p4s_entry *e) {
    uint32_t f = t->desc->lpm_field, w = t->kw_first[f], plen = 0;
    for (uint32_t i = 0; i < t->kw_count[f]; i++) plen += (uint32_t)__builtin_popcountll(e->msk[w + i]);
    return plen;
}

static p4s_lpm_bucket *lpm_bucket(p4s_table *t, uint32_t plen, int make) {
    uint32_t b = 0;
    while (b < t->nlpm && t->lpm[b].plen > plen) b++;
    if (b < t->nlpm && t->lpm[b].plen == plen) return &t->lpm[b];
    if (!make) return NULL;
    p4s_lpm_bucket *grown = (p4s_lpm_bucket *)realloc(t->lpm, (t->nlpm + 1) * sizeof *grown);
    if (grown == NULL) return NULL;
    t->lpm = grown;
    memmove(&t->lpm[b + 1], &t->lpm[b], (t->nlpm - b) * sizeof *grown);
    t->nlpm++;
    p4s_lpm_bucket *k = &t->lpm[b];
    memset(k, 0, sizeof *k);
    k->plen = plen;
    k->map.nkw = t->desc->nkw;
    uint32_t width = t->desc->widths[t->desc->lpm_field];
    u128 m = plen == 0 ? 0 : (p4s_mask128(plen) << (width - plen));
    k->mask[0] = (uint64_t)m;
    k->mask[1] = (uint64_t)(m >> 64);
    return k;
}

static void lpm_bucket_drop(p4s_table *t, p4s_lpm_bucket *k) {
    uint32_t b = (uint32_t)(k - t->lpm);
    hmap_free(&k->map);
    memmove(&t->lpm[b], &t->lpm[b + 1], (t->nlpm - b - 1) * sizeof *k);
    t->nlpm--;
}

static int table_index(p4s_table *t, p4s_entry *e) {
    const p4s_table_desc *d = t->desc;
    if (d->mode == P4S_MODE_EXACT) return hmap_put(&t->exact, e);
    if (d->mode == P4S_MODE_LPM) {
        p4s_lpm_bucket *k = lpm_bucket(t, lpm_plen(t, e), 1);
        return k == NULL ? -1 : hmap_put(&k->map, e);
    }
    if (t->nscan == t->capscan) {
        uint32_t cap = t->capscan ? 2 * t->capscan : 16;
        p4s_entry **s = (p4s_entry **)realloc(t->scan, cap * sizeof *s);
        if (s == NULL) return -1;
        t->scan = s;
        t->capscan = cap;
    }
    uint32_t at = t->nscan;                 /* after every entry of equal or higher priority */
    while (at > 0 && t->scan[at - 1]->priority < e->priority) at--;
    memmove(&t->scan[at + 1], &t->scan[at], (t->nscan - at) * sizeof *t->scan);
    t->scan[at] = e;
    t->nscan++;
    return 0;
}

static void table_unindex(p4s_table *t, p4s_entry *e) {
    const p4s_table_desc *d = t->desc;
    if (d->mode == P4S_MODE_EXACT) {
        hmap_del(&t->exact, e);
    } else if (d->mode == P4S_MODE_LPM) {
        p4s_lpm_bucket *k = lpm_bucket(t, lpm_plen(t, e), 0);
        if (k != NULL) {
            hmap_del(&k->map, e);
            if (k->map.count == 0) lpm_bucket_drop(t, k);
        }
    } else {
        for (uint32_t i = 0; i < t->nscan; i++) {
            if (t->scan[i] == e) {
                memmove(&t->scan[i], &t->scan[i + 1], (t->nscan - i - 1) * sizeof *t->scan);
                t->nscan--;
                break;
            }
        }
    }
}

static void set_action(p4s_table *t, p4s_entry *e, int32_t action, const uint64_t *args, uint32_t nargs,
                       int64_t member, int64_t group) {
    uint32_t n = nargs < t->desc->nargs ? nargs : t->desc->nargs;
    e->action = action;
    e->member = member;
    e->group = group;
    memset(e->args, 0, t->desc->nargs * sizeof(uint64_t));
    if (n) memcpy(e->args, args, n * sizeof(uint64_t));
}

/* A new entry in `slot`; match: nkw value words, then nkw mask (range: high) words. */
static int table_add(p4s_table *t, uint32_t slot, const uint64_t *match, int64_t priority, int32_t action,
                     const uint64_t *args, uint32_t nargs, int64_t member, int64_t group) {
    const p4s_table_desc *d = t->desc;
    if (slot >= t->nslots) {
        uint32_t n = t->nslots ? t->nslots : 16;
        while (n <= slot) n *= 2;
        p4s_entry **s = (p4s_entry **)realloc(t->by_slot, n * sizeof *s);
        if (s == NULL) return -1;
        memset(s + t->nslots, 0, (n - t->nslots) * sizeof *s);
        t->by_slot = s;
        t->nslots = n;
    }
    if (t->by_slot[slot] != NULL) return -2;
    p4s_entry *e = (p4s_entry *)calloc(1, sizeof *e + (d->nargs + 2 * d->nkw) * sizeof(uint64_t));
    if (e == NULL) return -1;
    e->args = e->data;
    e->val = e->data + d->nargs;
    e->msk = e->val + d->nkw;
    memcpy(e->val, match, 2 * d->nkw * sizeof(uint64_t));
    e->priority = priority;
    e->slot = slot;
    e->order = t->next_order++;
    set_action(t, e, action, args, nargs, member, group);
    if (table_index(t, e) < 0) {
        free(e);
        return -1;
    }
    t->by_slot[slot] = e;
    return 0;
}

static p4s_entry *table_slot(p4s_table *t, uint32_t slot) { return slot < t->nslots ? t->by_slot[slot] : NULL; }

static void table_delete(p4s_table *t, uint32_t slot) {
    p4s_entry *e = table_slot(t, slot);
    if (e == NULL) return;
    table_unindex(t, e);
    t->by_slot[slot] = NULL;
    free(e);
}

static void table_clear(p4s_table *t) {
    for (uint32_t i = 0; i < t->nslots; i++) table_delete(t, i);
}

/* ---- a pipeline's storage ----------------------------------------------------------------- */
static uint32_t cell_bytes(uint32_t width) {
    return width <= 8 ? 1 : width <= 16 ? 2 : width <= 32 ? 4 : width <= 64 ? 8 : 16;
}

int p4s_pipe_init(p4s_pipe *p, p4s_core *core, uint32_t gen, const p4s_pipe_desc *d) {
    p->core = core;
    p->gen = gen;
    p->desc = d;
    p->pk.dirty = 1;
    p4s_pk_reset(&p->pk, NULL, 0);
    p->tables = (p4s_table *)calloc(d->ntables + 1, sizeof *p->tables);
    p->registers = (p4s_regarray *)calloc(d->nregisters + 1, sizeof *p->registers);
    p->counters = (p4s_counterarray *)calloc(d->ncounters + 1, sizeof *p->counters);
    p->meters = (p4s_meterarray *)calloc(d->nmeters + 1, sizeof *p->meters);
    p->vsets = (p4s_table *)calloc(d->nvsets + 1, sizeof *p->vsets);
    p->profiles = (p4s_profile *)calloc(d->nprofiles + 1, sizeof *p->profiles);
    if (!p->tables || !p->registers || !p->counters || !p->meters || !p->vsets || !p->profiles) return -1;
    for (uint32_t i = 0; i < d->ntables; i++)
        if (table_init(&p->tables[i], &d->tables[i]) < 0) return -1;
    for (uint32_t i = 0; i < d->nvsets; i++)
        if (table_init(&p->vsets[i], &d->vsets[i]) < 0) return -1;
    for (uint32_t i = 0; i < d->nregisters; i++) {
        p4s_regarray *r = &p->registers[i];
        r->size = d->reg_sizes[i];
        r->width = d->reg_widths[i];
        r->cells = calloc(r->size ? r->size : 1, cell_bytes(r->width));
        if (r->cells == NULL) return -1;
    }
    for (uint32_t i = 0; i < d->ncounters; i++) {
        p4s_counterarray *c = &p->counters[i];
        c->size = d->counter_sizes[i];
        c->packets = (uint64_t *)calloc(c->size ? c->size : 1, sizeof(uint64_t));
        c->bytes = (uint64_t *)calloc(c->size ? c->size : 1, sizeof(uint64_t));
        if (c->packets == NULL || c->bytes == NULL) return -1;
    }
    for (uint32_t i = 0; i < d->nmeters; i++) {
        p4s_meterarray *m = &p->meters[i];
        m->size = d->meter_sizes[i];
        m->bytes = d->meter_bytes[i];
        m->cells = (p4s_meter *)calloc(m->size ? m->size : 1, sizeof(p4s_meter));
        if (m->cells == NULL) return -1;
    }
    return 0;
}

static void replicas_free(p4s_idmap *m) {
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->state[i] != 1) continue;
        p4s_replicas *r = (p4s_replicas *)m->vals[i];
        free(r->ports);
        free(r->rids);
    }
    idmap_free(m);
}

void p4s_pipe_destroy(p4s_pipe *p) {
    const p4s_pipe_desc *d = p->desc;
    if (p->tables)
        for (uint32_t i = 0; i < d->ntables; i++) table_destroy(&p->tables[i]);
    if (p->vsets)
        for (uint32_t i = 0; i < d->nvsets; i++) table_destroy(&p->vsets[i]);
    if (p->registers)
        for (uint32_t i = 0; i < d->nregisters; i++) free(p->registers[i].cells);
    if (p->counters)
        for (uint32_t i = 0; i < d->ncounters; i++) {
            free(p->counters[i].packets);
            free(p->counters[i].bytes);
        }
    if (p->meters)
        for (uint32_t i = 0; i < d->nmeters; i++) free(p->meters[i].cells);
    if (p->profiles)
        for (uint32_t i = 0; i < d->nprofiles; i++) {
            idmap_free(&p->profiles[i].members);
            idmap_free(&p->profiles[i].groups);
        }
    replicas_free(&p->mcast);
    replicas_free(&p->clones);
    free(p->tables);
    free(p->vsets);
    free(p->registers);
    free(p->counters);
    free(p->meters);
    free(p->profiles);
    p4s_jobs_clear(p);
    free(p->jobs);
    free(p->dbuf);
    free(p->pend);
}

/* ---- digests and jobs ------------------------------------------------------------------------ */
uint64_t *p4s_digest_begin(p4s_pipe *p, uint32_t id, uint32_t nwords) {
    uint32_t size = (uint32_t)(sizeof(p4s_digest_rec) + nwords * sizeof(uint64_t));
    if (p->pused + size > p->pcap) {
        uint32_t cap = p->pcap ? p->pcap : 1024;
        while (cap < p->pused + size) cap *= 2;
        uint8_t *b = (uint8_t *)realloc(p->pend, cap);
        if (b == NULL) p4s_fault(p, "out of memory");
        p->pend = b;
        p->pcap = cap;
    }
    p4s_digest_rec *r = (p4s_digest_rec *)(p->pend + p->pused);
    p->pused += size;
    r->gen = p->gen;
    r->id = id;
    r->nwords = nwords;
    r->_pad = 0;
    return r->words;
}

void p4s_digests_commit(p4s_pipe *p) {
    uint32_t at = 0;
    while (at < p->pused) {
        const p4s_digest_rec *r = (const p4s_digest_rec *)(p->pend + at);
        p4s_core_digest(p->core, r);
        at += (uint32_t)(sizeof *r + r->nwords * sizeof(uint64_t));
    }
    p->pused = 0;
}

void p4s_job_push(p4s_pipe *p, const uint8_t *a, uint32_t na, const uint8_t *b, uint32_t nb, uint32_t port,
                  uint32_t itype, int64_t fl, const void *meta) {
    uint32_t len = na + nb;
    uint32_t msize = p->desc->meta_size;
    if (p->njobs == p->capjobs) {
        uint32_t cap = p->capjobs ? 2 * p->capjobs : 8;
        p4s_job **j = (p4s_job **)realloc(p->jobs, cap * sizeof *j);
        if (j == NULL) p4s_fault(p, "out of memory");
        p->jobs = j;
        p->capjobs = cap;
    }
    p4s_job *job = (p4s_job *)malloc(sizeof *job + msize);
    uint8_t *copy = (uint8_t *)malloc(len ? len : 1);
    if (job == NULL || copy == NULL) {
        free(job);
        free(copy);
        p4s_fault(p, "out of memory");
    }
    memcpy(copy, a, na);
    if (nb) memcpy(copy + na, b, nb);
    memcpy(job->meta, meta, msize);
    job->data = copy;
    job->len = len;
    job->port = port;
    job->itype = itype;
    job->fl = fl;
    p->jobs[p->njobs++] = job;
}

void p4s_jobs_clear(p4s_pipe *p) {
    for (uint32_t i = 0; i < p->njobs; i++) {
        free(p->jobs[i]->data);
        free(p->jobs[i]);
    }
    p->njobs = 0;
    if (p->cur_job != NULL) {
        free(p->cur_job->data);
        free(p->cur_job);
        p->cur_job = NULL;
    }
}

/* ---- the control-plane API (Python, through cffi; every call holds the core's lock) ------- */
#define API_BEGIN(pl) p4s_pipe *p = (p4s_pipe *)(pl); pthread_mutex_lock(&p->core->mu)
#define API_END() pthread_mutex_unlock(&p->core->mu)

int p4s_table_add(void *pl, uint32_t tid, uint32_t slot, const uint64_t *match, int64_t priority, int32_t action,
                  const uint64_t *args, uint32_t nargs, int64_t member, int64_t group) {
    API_BEGIN(pl);
    int r = table_add(&p->tables[tid], slot, match, priority, action, args, nargs, member, group);
    API_END();
    return r;
}

int p4s_table_modify(void *pl, uint32_t tid, uint32_t slot, int32_t action, const uint64_t *args, uint32_t nargs,
                     int64_t member, int64_t group) {
    API_BEGIN(pl);
    p4s_table *t = &p->tables[tid];
    p4s_entry *e = table_slot(t, slot);
    if (e != NULL) set_action(t, e, action, args, nargs, member, group);
    API_END();
    return e == NULL ? -1 : 0;
}

void p4s_table_delete(void *pl, uint32_t tid, uint32_t slot) {
    API_BEGIN(pl);
    table_delete(&p->tables[tid], slot);
    API_END();
}

void p4s_table_set_default(void *pl, uint32_t tid, int32_t action, const uint64_t *args, uint32_t nargs) {
    API_BEGIN(pl);
    p4s_table *t = &p->tables[tid];
    uint32_t n = nargs < t->desc->nargs ? nargs : t->desc->nargs;
    t->default_action = action;
    memset(t->default_args, 0, t->desc->nargs * sizeof(uint64_t));
    if (n) memcpy(t->default_args, args, n * sizeof(uint64_t));
    API_END();
}

p4s_direct *p4s_table_direct(void *pl, uint32_t tid, uint32_t slot) {
    API_BEGIN(pl);
    p4s_entry *e = table_slot(&p->tables[tid], slot);
    API_END();
    return e == NULL ? NULL : &e->d;
}

void *p4s_register_cells(void *pl, uint32_t rid) { return ((p4s_pipe *)pl)->registers[rid].cells; }

uint64_t *p4s_counter_cells(void *pl, uint32_t cid, int bytes) {
    p4s_counterarray *c = &((p4s_pipe *)pl)->counters[cid];
    return bytes ? c->bytes : c->packets;
}

p4s_meter *p4s_meter_cell(void *pl, uint32_t mid, uint32_t index) { return &((p4s_pipe *)pl)->meters[mid].cells[index]; }

/* Configure (cir, pir in units per second) or, with configured 0, unconfigure a meter. */
void p4s_meter_config(void *pl, p4s_meter *m, int configured, double cir, double cburst, double pir, double pburst) {
    API_BEGIN(pl);
    m->configured = configured;
    m->cir = cir;
    m->pir = pir;
    m->cburst = m->tc = cburst;
    m->pburst = m->tp = pburst;
    m->last = p4s_now_s();
    API_END();
}

/* Replace a value set's members: n of them, each encoded as a table entry's match. */
int p4s_vset_set(void *pl, uint32_t vid, const uint64_t *matches, uint32_t n) {
    API_BEGIN(pl);
    p4s_table *t = &p->vsets[vid];
    table_clear(t);
    int r = 0;
    for (uint32_t i = 0; i < n && r == 0; i++)
        r = table_add(t, i, matches + (size_t)i * 2 * t->desc->nkw, 0, -1, NULL, 0, -1, -1);
    API_END();
    return r;
}

/* A member of action profile `pid`: set (present) or removed. */
int p4s_profile_member(void *pl, uint32_t pid, uint64_t id, int present, int32_t action, const uint64_t *args,
                       uint32_t nargs) {
    API_BEGIN(pl);
    int r = 0;
    p4s_member *m = NULL;
    if (present) {
        m = (p4s_member *)malloc(sizeof *m + (nargs ? nargs : 1) * sizeof(uint64_t));
        if (m == NULL) {
            API_END();
            return -1;
        }
        m->action = action;
        m->nargs = nargs;
        if (nargs) memcpy(m->args, args, nargs * sizeof(uint64_t));
    }
    void *old;
    r = idmap_set(&p->profiles[pid].members, id, m, &old);
    if (r < 0) free(m);
    else free(old);
    API_END();
    return r;
}

/* A group of action selector `pid` with its member ids in handle order, or removed. */
int p4s_profile_group(void *pl, uint32_t pid, uint64_t id, int present, const uint64_t *ids, uint32_t n) {
    API_BEGIN(pl);
    p4s_group *g = NULL;
    if (present) {
        g = (p4s_group *)malloc(sizeof *g + (n ? n : 1) * sizeof(uint64_t));
        if (g == NULL) {
            API_END();
            return -1;
        }
        g->n = n;
        if (n) memcpy(g->ids, ids, n * sizeof(uint64_t));
    }
    void *old;
    int r = idmap_set(&p->profiles[pid].groups, id, g, &old);
    if (r < 0) free(g);
    else free(old);
    API_END();
    return r;
}

/* A multicast group (kind 0) or a clone session (kind 1): its replicas, or removed. */
int p4s_replicas_set(void *pl, int kind, uint64_t id, int present, const uint32_t *ports, const uint32_t *rids,
                     uint32_t n, uint32_t packet_length_bytes) {
    API_BEGIN(pl);
    p4s_idmap *map = kind ? &p->clones : &p->mcast;
    p4s_replicas *r = NULL;
    if (present) {
        r = (p4s_replicas *)calloc(1, sizeof *r);
        uint32_t *pp = (uint32_t *)malloc((n ? n : 1) * sizeof *pp), *rr = (uint32_t *)malloc((n ? n : 1) * sizeof *rr);
        if (r == NULL || pp == NULL || rr == NULL) {
            free(r);
            free(pp);
            free(rr);
            API_END();
            return -1;
        }
        if (n) {
            memcpy(pp, ports, n * sizeof *pp);
            memcpy(rr, rids, n * sizeof *rr);
        }
        r->n = n;
        r->ports = pp;
        r->rids = rr;
        r->packet_length_bytes = packet_length_bytes;
    }
    void *old;
    int rc = idmap_set(map, id, r, &old);
    p4s_replicas *gone = (p4s_replicas *)(rc < 0 ? (void *)r : old);
    if (gone != NULL) {
        free(gone->ports);
        free(gone->rids);
        free(gone);
    }
    API_END();
    return rc;
}
