/* One INC call (hosts/agent.py's Worker._exchange and its _Call classes), from the first
 * packet to the result in the caller's array. The chunk each item carries, its seq, slot,
 * version, exponent, need and flags are exactly what the Python path sends (docs/protocol.md,
 * "The host, per allreduce"), so C and Python workers can share a job; when packets go and
 * come (batches, timers) may differ, which the protocol allows.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#define REORDER_THRESHOLD 3          /* hosts/agent.py: later results before a chunk's is a loss */

enum { FREE = 0, IN_FLIGHT = 1, PENDING = 2 };

typedef struct {
    int64_t index, chunk;
    int64_t seq;                     /* unwrapped: the call's first seq + index */
    double first_sent, last_sent, timer_from, timer;   /* timer_from INFINITY: a silent item's, not yet started */
    int64_t sends;
    int fast, expired, state;
    int flags, need;                 /* its result's, while it waits to be taken in item order */
    uint8_t *payload;
    int payload_len;
} item_t;

/* Results that came before this worker made their item (hosts/agent.py Worker._early): entry
   seq % window, at most a window ahead, kept across calls in the engine. */
typedef struct {
    size_t packet;                   /* bytes per entry: a whole packet of the job's K */
    int64_t *seq;                    /* unwrapped; -1: empty */
    int *len;
    uint8_t *data;
} early_t;

typedef struct {
    inc_engine *e;
    inc_call *c;
    int64_t m, k, slots;             /* chunks; elements per chunk; item buffers (ring) */
    int64_t size_last;               /* elements in the last chunk */
    item_t *items;
    int64_t answered, next_item, in_flight;
    int done;
    int eager;                       /* eager Broadcast rounds: a gate ends every `period` items and the call; */
    int64_t period, lag;             /* ... a gate goes once items up to `lag` before it are answered; */
    int64_t first_gate;              /* ... items from `window` on wait for this gate's result (-1: none) */
    int window_acks;                 /* a Reduce whose roots acknowledge it (OP_WINDOW_ACK) */
    int32_t *owned;                  /* as a root, by item: the element a window ACK gives my item answered
                                        since my last one (WINDOW_ACK_ANSWERED | flags << 8 | need), 0: none */
    int64_t owned_count, owned_from; /* ... how many; none before owned_from */
    uint8_t *window_ack;             /* ... the packet, built and sent one at a time */
    int32_t *sums;                   /* m * k, what the results carried */
    double first_sent, started;
    struct sockaddr_in agg;
    send_batch out;
    recv_batch *in;
    int64_t bad_count;               /* chunks with OVERFLOW (int32, ordered, gather) */
    /* ordered: the wire words; its NaN chunks */
    int32_t *words;
    uint8_t *has_nan;
    /* float: block floating point (hosts/agent.py _Float32Call) */
    double *values;                  /* m * k, widened */
    int16_t *fits_at, *local, *agreed, *used;
    int64_t *item_chunk, *item_basis;
    uint8_t *item_redo;
    int64_t fresh, known;
    int64_t *redo_at, *redo_chunk, redo_head, redo_tail;
    int64_t *failed, failed_count;
    int has_first_pass_done;
    double first_pass_done;
    int32_t *quantized;              /* k: one chunk's wire values */
} call_t;

static void early_free(early_t *k)
{
    if (k == NULL)
        return;
    free(k->seq);
    free(k->len);
    free(k->data);
    free(k);
}

static early_t *early_new(int64_t window, size_t packet)
{
    early_t *k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->packet = packet;
    k->seq = malloc((size_t)window * sizeof *k->seq);
    k->len = calloc((size_t)window, sizeof *k->len);
    k->data = malloc((size_t)window * packet);
    if (k->seq == NULL || k->len == NULL || k->data == NULL) {
        early_free(k);
        return NULL;
    }
    for (int64_t i = 0; i < window; i++)
        k->seq[i] = -1;
    return k;
}

static int root_of(const call_t *t, int64_t chunk)
{
    return t->c->roots ? t->c->roots[chunk] : 0;
}

/* Whether this worker gets the chunk's sum: a Reduce's (and ReduceScatter's) other chunks come
   back as header-only ACKs, and their sums stay zeros. */
static int gets_sum(const call_t *t, int64_t chunk)
{
    return t->c->collective != COLL_REDUCE || root_of(t, chunk) == t->e->worker_id;
}

static int sends_data(const call_t *t, int64_t chunk)
{
    if (t->c->collective == COLL_BROADCAST)
        return root_of(t, chunk) == t->e->worker_id;
    return t->c->collective != COLL_BARRIER;
}

/* hosts/agent.py _GatherCall.gate, .ready and .silent */
static int gate(const call_t *t, int64_t index)
{
    return !t->eager || index % t->period == t->period - 1 || index == t->m - 1;
}

static int ready(const call_t *t, int64_t index)
{
    if (!t->eager || index >= t->m)
        return 1;
    if (t->first_gate >= 0 && index >= t->e->window && t->answered <= t->first_gate)
        return 0;
    return !gate(t, index) || t->answered >= index - t->lag;
}

static int silent(const call_t *t, int64_t index)
{
    return !gate(t, index) && !sends_data(t, index);
}

/* hosts/agent.py _GatherCall.in_order: a gate waits for every worker and eager rounds for
   their own root alone, so only one root's eager rounds come back in seq order. */
static int in_order(const call_t *t, int64_t earlier, int64_t later)
{
    return !t->eager || (!gate(t, earlier) && root_of(t, earlier) == root_of(t, later));
}

/* hosts/agent.py _GatherCall.shows_lost: every worker sends its items in order, so a later
   result of the same root, or a later gate (which every root has sent), comes after the root
   has sent `earlier`. */
static int shows_lost(const call_t *t, int64_t earlier, int64_t later)
{
    return gate(t, later) || root_of(t, earlier) == root_of(t, later);
}

static int bounded_guess(int64_t exponent)
{
    return exponent < EXPONENT_MIN + 1 ? EXPONENT_MIN + 1 : exponent > EXPONENT_MAX ? EXPONENT_MAX : (int)exponent;
}

/* ---- which chunk item `index` carries (-1: none yet, or the call is done) ---- */

static int64_t assign(call_t *t, int64_t index)
{
    if (t->c->kind != ENG_KIND_FLOAT) {
        if (index < t->m)
            return index;
        t->done = t->answered == t->m;
        return -1;
    }
    int64_t window = t->e->window;
    if (t->redo_head < t->redo_tail
            && (t->redo_at[t->redo_head] <= index || (t->fresh == t->m && t->answered == index))) {
        int64_t chunk = t->redo_chunk[t->redo_head++];
        t->used[chunk] = (int16_t)(t->agreed[chunk] < EXPONENT_MAX ? t->agreed[chunk] : EXPONENT_MAX);
        t->item_chunk[index] = chunk;
        t->item_basis[index] = t->used[chunk];
        t->item_redo[index] = 1;
        return chunk;
    }
    if (t->fresh < t->m) {
        int64_t chunk = t->fresh++;
        int64_t basis;
        if (chunk < t->known) {
            basis = t->used[chunk] - t->e->exponent_margin;
        } else {        /* the exponent all workers agreed for the item this one's slot carried last */
            int64_t earlier = index - window;
            int64_t agreed = t->agreed[t->item_chunk[earlier]];
            basis = agreed == EXPONENT_MIN ? t->item_basis[earlier] : agreed;
            t->used[chunk] = (int16_t)bounded_guess(basis + t->e->exponent_margin);
        }
        t->item_chunk[index] = chunk;
        t->item_basis[index] = basis;
        t->item_redo[index] = 0;
        return chunk;
    }
    t->done = t->answered == index && t->redo_head == t->redo_tail;
    return -1;
}

/* ---- the packet of item (chunk, seq) ---- */

static int build_packet(call_t *t, int64_t chunk, int64_t seq, uint8_t *out)
{
    inc_engine *e = t->e;
    int64_t k = t->k;
    int data = sends_data(t, chunk);
    int64_t n = chunk < t->m - 1 ? k : t->size_last, carried = data_elements(n, k);
    inc_header h = {.opcode = data ? OP_CONTRIB : OP_JOIN, .job_id = e->job_id, .worker_id = e->worker_id,
                    .count = (int)n, .pool_version = (int)((seq / e->window) % 2),
                    .slot = (int)(seq % e->window), .seq = (uint32_t)seq, .reduce_op = t->c->reduce_op,
                    .collective = t->c->collective, .root = root_of(t, chunk)};
    uint8_t *elements = out + INC_HEADER_SIZE;
    switch (t->c->kind) {
    case ENG_KIND_FLOAT: {
        int exponent = t->used[chunk];
        h.exponent = exponent;
        h.need = t->local[chunk];
        /* fits_at holds the chunk's own exponent, found when the call began */
        int fits = quantize_row(t->values + chunk * k, k, t->fits_at[chunk], exponent, e->num_workers, t->quantized);
        h.flags = fits ? 0 : FLAG_OVERFLOW;
        for (int64_t i = 0; i < carried; i++)
            put_be32(elements + 4 * i, (uint32_t)t->quantized[i]);
        break;
    }
    case ENG_KIND_ORDERED:
        h.flags = t->has_nan[chunk] ? FLAG_OVERFLOW : 0;
        /* fall through */
    default: {
        if (!gate(t, chunk))
            h.flags = FLAG_EAGER;
        if (!data)
            break;
        const int32_t *src = t->c->kind == ENG_KIND_ORDERED ? t->words : t->c->data;
        for (int64_t i = 0; i < n; i++)
            put_be32(elements + 4 * i, (uint32_t)src[chunk * k + i]);
        memset(elements + 4 * n, 0, (size_t)(4 * (carried - n)));
    }
    }
    if (t->window_acks)
        h.flags |= FLAG_WINDOW_ACKS;
    header_pack(&h, out);
    return data ? (int)(INC_HEADER_SIZE + 4 * carried) : INC_HEADER_SIZE;
}

/* ---- results, taken in item order ---- */

static void answered_in_order(call_t *t, int64_t index, int64_t chunk, int flags, int need)
{
    if (t->c->kind != ENG_KIND_FLOAT) {
        if (flags & FLAG_OVERFLOW)
            t->c->bad_chunks[t->bad_count++] = chunk;
        return;
    }
    t->agreed[chunk] = (int16_t)need;
    int overflow = flags & FLAG_OVERFLOW;
    if (t->item_redo[index]) {
        if (overflow)
            t->failed[t->failed_count++] = chunk;
        return;
    }
    int too_coarse = EXPONENT_MIN < need && need < t->used[chunk] - t->e->exponent_slack;
    if (overflow || too_coarse) {
        t->redo_at[t->redo_tail] = index + t->e->window;
        t->redo_chunk[t->redo_tail++] = chunk;
        t->c->stats.redone_chunks++;
    }
    if (chunk == t->m - 1) {
        t->first_pass_done = eng_now();
        t->has_first_pass_done = 1;
    }
}

/* `elements`: a result's `carried` elements (take_result checked they are there), or NULL for
   an ACK. */
static void record(call_t *t, item_t *it, int flags, int need, const uint8_t *elements, int64_t carried)
{
    if (elements != NULL) {
        int32_t *row = t->sums + it->chunk * t->k;
        for (int64_t i = 0; i < carried; i++)
            row[i] = (int32_t)get_be32(elements + 4 * i);
        memset(row + carried, 0, (size_t)(4 * (t->k - carried)));
    }
    it->flags = flags;
    it->need = need;
    it->state = PENDING;
    while (t->answered < t->next_item) {
        item_t *next = &t->items[t->answered % t->slots];
        if (next->state != PENDING || next->index != t->answered)
            break;
        answered_in_order(t, next->index, next->chunk, next->flags, next->need);
        next->state = FREE;
        t->answered++;
    }
}

/* ---- sending and sending again ---- */

static void resend(call_t *t, item_t *it)
{
    if (it->sends == 1)              /* the switch marks the round, so no worker samples a round trip from it */
        it->payload[1] |= FLAG_RETRANSMIT;
    batch_add(&t->out, it->payload, (size_t)it->payload_len, &t->agg);
    it->sends++;
    it->last_sent = it->timer_from = eng_now();
    t->c->stats.packets_sent++;
    t->c->stats.retransmits++;
}

/* hosts/agent.py Worker._keep_early: a result for an item this worker has not made yet (an eager
   round's root is ahead of it, maybe in the call before) is kept for that item, if less than a
   window ahead; anything else was answered already, or is not ours. */
static void keep_early(call_t *t, const inc_header *h, const uint8_t *data, int len)
{
    inc_engine *e = t->e;
    early_t *k = e->early;
    int64_t unmade = (int64_t)e->next_seq + t->next_item;
    uint32_t ahead = h->seq - (uint32_t)(unmade & 0xFFFFFFFF);
    int64_t seq = unmade + ahead, i = seq % e->window;
    if (ahead >= UINT32_C(1) << 31 || h->slot != i || k->seq[i] == seq) {
        t->c->stats.duplicate_results++;
    } else if (ahead < (uint32_t)e->window) {
        size_t n = (size_t)len < k->packet ? (size_t)len : k->packet;
        memcpy(k->data + (size_t)i * k->packet, data, n);
        k->len[i] = (int)n;
        k->seq[i] = seq;
    } else {
        t->c->stats.early_drops++;
    }
}

/* hosts/agent.py Worker._answer: an item has its answer (a result, an ACK, or a root's window
   ACK for it): time its round trip where that is sound, open the window, record it. Karn, a
   round that waited for a retransmission, items sent before the job's first result (their wait
   timed the slowest peer's start-up) and silent items (their wait timed their root's lateness)
   give no round-trip sample. */
static void answer(call_t *t, item_t *it, int flags, int need, const uint8_t *elements, int64_t carried,
                   double now)
{
    inc_engine *e = t->e;
    if (it->sends == 1 && !(flags & FLAG_RETRANSMIT) && it->first_sent >= e->live_since && !silent(t, it->index))
        rto_sample(&e->rto, now - it->first_sent);
    cwnd_on_ack(&e->cwnd, it->seq);
    if (!t->c->stats.results) {
        t->c->stats.first_result_s = now - t->first_sent;
        t->c->stats.has_first_result = 1;
    }
    t->c->stats.results++;
    record(t, it, flags, need, elements, carried);
}

/* hosts/agent.py Worker._accept_window_ack: a root's window ACK answers those of its items among
   the `count` up to seq that it says have their results, each as an ACK with that result's flags
   and need would answer it. Returns the last it answered. */
static item_t *take_window_ack(call_t *t, const inc_header *h, const uint8_t *data)
{
    inc_engine *e = t->e;
    eng_stats *stats = &t->c->stats;
    item_t *last = NULL;
    double now = eng_now();
    if (now < e->live_since)
        e->live_since = now;
    int count = h->count < t->k ? h->count : (int)t->k;
    for (int i = 0; i < count; i++) {
        uint32_t index = h->seq - (uint32_t)h->count + (uint32_t)i - (uint32_t)(e->next_seq & 0xFFFFFFFF);
        item_t *it = index < (uint64_t)t->next_item ? &t->items[index % t->slots] : NULL;
        uint32_t code = get_be32(data + INC_HEADER_SIZE + 4 * i);
        if (it == NULL || it->state != IN_FLIGHT || it->index != (int64_t)index || !(code & WINDOW_ACK_ANSWERED)
                || root_of(t, it->chunk) != h->root)
            continue;
        t->in_flight--;
        /* The round trip now ends at the root's window ACK, and the RTO must cover it (as TCP's
           covers a delayed ack). */
        answer(t, it, (int)(code >> 8 & 0xFF), (int8_t)(code & 0xFF), NULL, 0, now);
        last = it;
    }
    stats->window_acks++;
    return last;
}

/* hosts/agent.py Worker._send_window_acks: as a root, tell the others which of my items have their
   results since my last window ACK, with each one's flags and need (they decide what the others
   do next as they decide it here), once a quarter window of them waits, or I am `idle` (about to
   wait: the others may be waiting for them), as at the call's end. One window ACK lists up to K
   items from the first of them on; an item without its result yet is left out, not held. */
static void send_window_acks(call_t *t, int idle)
{
    inc_engine *e = t->e;
    if (!t->owned_count || (!idle && t->owned_count < (e->window / 4 > 1 ? e->window / 4 : 1)))
        return;
    uint8_t *elements = t->window_ack + INC_HEADER_SIZE;
    for (int64_t j = t->owned_from; t->owned_count > 0 && j < t->next_item; ) {
        if (!t->owned[j]) {
            j++;
            continue;
        }
        int64_t start = j, count = 0;
        memset(elements, 0, (size_t)(4 * t->k));
        for (; j < start + t->k && j < t->next_item; j++) {
            if (!t->owned[j])
                continue;
            put_be32(elements + 4 * (j - start), (uint32_t)t->owned[j]);
            t->owned[j] = 0;
            t->owned_count--;
            count = j - start + 1;
        }
        inc_header h = {.opcode = OP_WINDOW_ACK, .flags = FLAG_WINDOW_ACKS, .job_id = e->job_id,
                        .worker_id = e->worker_id, .count = (int)count,
                        .seq = (uint32_t)(e->next_seq + (uint64_t)start + (uint64_t)count),
                        .reduce_op = t->c->reduce_op, .collective = COLL_REDUCE, .root = e->worker_id};
        header_pack(&h, t->window_ack);
        batch_add(&t->out, t->window_ack, (size_t)(INC_HEADER_SIZE + 4 * data_elements(count, t->k)), &t->agg);
        batch_flush(&t->out);            /* one buffer: sent before it is built again */
        t->c->stats.packets_sent++;
        t->c->stats.window_acks++;
    }
}

/* The item a datagram answers (recorded), or NULL for anything else (kept if early). */
static item_t *take_result(call_t *t, const uint8_t *data, int len)
{
    inc_engine *e = t->e;
    if (len < INC_HEADER_SIZE)
        return NULL;
    inc_header h;
    header_unpack(data, &h);
    int header_only = h.opcode == OP_JOIN || h.opcode == OP_ACK;
    int64_t carried = data_elements(h.count, t->k);
    if (!header_only && (h.count > t->k || len < INC_HEADER_SIZE + 4 * carried))
        return NULL;
    if (h.opcode == OP_WINDOW_ACK && t->window_acks && h.job_id == e->job_id)
        return take_window_ack(t, &h, data);
    if ((h.opcode != OP_RESULT && h.opcode != OP_ACK) || h.job_id != e->job_id)
        return NULL;
    uint32_t index = h.seq - (uint32_t)(e->next_seq & 0xFFFFFFFF);   /* item index, mod 2^32 */
    item_t *it = index < (uint64_t)t->next_item ? &t->items[index % t->slots] : NULL;
    if (it == NULL || it->state != IN_FLIGHT || it->index != (int64_t)index || h.slot != it->seq % e->window) {
        keep_early(t, &h, data, len);
        return NULL;
    }
    t->in_flight--;
    double now = eng_now();
    if (now < e->live_since)
        e->live_since = now;
    if ((h.flags & FLAG_EAGER) && e->eager_rounds)
        e->eager = 1;
    if ((h.flags & FLAG_WINDOW_ACKS) && h.collective == COLL_REDUCE && e->window_acks)
        e->takes_window_acks = 1;
    answer(t, it, h.flags, h.need, h.opcode == OP_RESULT ? data + INC_HEADER_SIZE : NULL, carried, now);
    if (t->window_acks && root_of(t, it->chunk) == e->worker_id) {   /* the others learn it from me */
        if (!t->owned_count || it->index < t->owned_from)
            t->owned_from = it->index;
        t->owned[it->index] = WINDOW_ACK_ANSWERED | h.flags << 8 | (h.need & 0xFF);
        t->owned_count++;
    }
    return it;
}

/* Items sent before `answered` and REORDER_THRESHOLD or more older are lost: send each once
   again now rather than after its timeout (TCP's fast retransmit). */
static void resend_overtaken(call_t *t, const item_t *answered, int64_t highest)
{
    int64_t index = answered->index;
    for (int64_t j = t->answered; j <= index - REORDER_THRESHOLD; j++) {
        item_t *it = &t->items[j % t->slots];
        if (it->state != IN_FLIGHT || it->index != j || it->fast || it->last_sent >= answered->first_sent
                || !in_order(t, j, index))
            continue;
        if (t->window_acks && root_of(t, it->chunk) != root_of(t, answered->chunk))
            continue;                    /* another root acknowledges it, at its own pace */
        it->fast = 1;
        t->c->stats.fast_retransmits++;
        cwnd_on_loss(&t->e->cwnd, highest);
        resend(t, it);
    }
}

/* hosts/agent.py Worker._arm_silent: start the timers of silent items whose results now look
   lost: those before item `answered` that its result shows lost; with `answered` < 0, the
   oldest in flight. Returns when the first of them is due. */
static double arm_silent(call_t *t, int64_t answered)
{
    double now = eng_now(), due = INFINITY;
    int64_t hi = answered < 0 ? t->answered + 1 : answered;
    for (int64_t j = t->answered; j < hi && j < t->next_item; j++) {
        item_t *it = &t->items[j % t->slots];
        if (it->state != IN_FLIGHT || it->index != j)
            continue;
        if (isinf(it->timer_from) && (answered < 0 || shows_lost(t, j, answered))) {
            it->timer_from = now;
            it->timer = t->e->rto.rto;
            due = now + it->timer;
        }
        if (answered < 0)
            break;
    }
    return due;
}

/* A result, taken for its item, and what it shows about the items before it. Returns 1 if it
   answered an item (progress), else 0. */
static int on_result(call_t *t, const uint8_t *data, int len, double *wake, double *last_progress)
{
    item_t *it = take_result(t, data, len);
    if (it == NULL)
        return 0;
    *last_progress = eng_now();
    if (t->eager)
        *wake = fmin(*wake, arm_silent(t, it->index));
    resend_overtaken(t, it, (int64_t)t->e->next_seq + t->next_item - 1);
    if (t->window_acks)
        send_window_acks(t, 0);
    return 1;
}

/* Items without a result for an RTO since they were sent and since the last progress: back
   off, cut the window, send them again; give up on an item past the time budget. Returns
   when the next timer is due, or -1 after a give-up (the call's status says which). */
static double check_timers(call_t *t, double last_progress, int64_t highest)
{
    inc_engine *e = t->e;
    double now = eng_now();
    int64_t lo = t->answered, hi = t->next_item;
    int expired = 0, all_silent = 1;
    double longest = 0, oldest_sent = INFINITY;
    for (int64_t j = lo; j < hi; j++) {
        item_t *it = &t->items[j % t->slots];
        if (it->state != IN_FLIGHT || it->index != j)
            continue;
        if (now - it->first_sent >= e->give_up_after) {
            t->c->status = ENG_TIMEOUT;
            t->c->timeout_seq = (uint64_t)it->seq & 0xFFFFFFFF;
            t->c->timeout_chunk = it->chunk;
            t->c->timeout_sends = it->sends;
            t->c->timeout_waited = now - it->first_sent;
            return -1;
        }
        it->expired = now >= fmax(it->timer_from, last_progress) + it->timer;
        if (it->expired) {
            expired++;
            all_silent = all_silent && silent(t, j);
            longest = fmax(longest, it->timer);
            oldest_sent = fmin(oldest_sent, it->last_sent);
        }
    }
    if (expired) {
        t->c->stats.timeouts++;
        /* Requests for eager rounds whose root may be late, or have lost its chunk and not yet
           sent it again: no sign of congestion, so the RTO stays; each request waits longer. */
        double rto = fmin(e->rto.max_rto, 2 * longest);
        if (!all_silent) {
            rto = rto_backoff(&e->rto, longest);
            cwnd_on_timeout(&e->cwnd, highest);
        }
        /* Silence since all of them were sent: a peer has not started this call yet, or the
           switch is gone. One probe says when that ends; a window of copies would only queue.
           Every timer restarts with the probe's, so they do not expire one by one after it. */
        int probe_only = last_progress < oldest_sent;
        int sent_one = 0;
        for (int64_t j = lo; j < hi; j++) {
            item_t *it = &t->items[j % t->slots];
            if (it->state != IN_FLIGHT || it->index != j)
                continue;
            if (probe_only && !isinf(it->timer_from)) {   /* silent items still wait for a sign of loss */
                it->timer = rto;
                it->timer_from = now;
            }
            if (!it->expired || (probe_only && sent_one))
                continue;
            it->timer = rto;
            resend(t, it);
            sent_one = 1;
        }
        batch_flush(&t->out);
    }
    double wake = INFINITY;
    for (int64_t j = lo; j < hi; j++) {
        item_t *it = &t->items[j % t->slots];
        if (it->state == IN_FLIGHT && it->index == j)
            wake = fmin(wake, fmin(fmax(it->timer_from, last_progress) + it->timer, it->first_sent + e->give_up_after));
    }
    return wake;
}

/* ---- the exchange (hosts/agent.py Worker._exchange) ---- */

static void exchange(call_t *t)
{
    inc_engine *e = t->e;
    eng_stats *stats = &t->c->stats;
    int64_t window = e->window;
    int64_t first_seq = (int64_t)e->next_seq;
    double last_progress = eng_now();
    double wake = INFINITY;          /* no timer is due before it; a stale one only wakes the loop early */
    int drained = 0;                 /* the last read emptied the socket */
    double spin = call_spin(t->m, e->spin, e->spin_large);
    stats->setup_s = last_progress - t->started;
    for (;;) {
        /* Item j reuses item j - window's slot: it may go once items up to that one are answered. */
        double t0 = eng_now();
        int64_t first_new = t->next_item;
        while (t->in_flight < cwnd_allowed(&e->cwnd) && t->next_item < t->answered + window
                && ready(t, t->next_item)) {
            int64_t chunk = assign(t, t->next_item);
            if (chunk < 0)
                break;
            item_t *it = &t->items[t->next_item % t->slots];
            it->index = t->next_item;
            it->chunk = chunk;
            it->seq = first_seq + t->next_item;
            it->sends = 1;
            it->fast = 0;
            it->state = IN_FLIGHT;
            it->payload_len = build_packet(t, chunk, it->seq, it->payload);
            if (!silent(t, t->next_item)) {  /* a silent item is sent only if its result is lost */
                batch_add(&t->out, it->payload, (size_t)it->payload_len, &t->agg);
                stats->packets_sent++;
            }
            t->next_item++;
            t->in_flight++;
        }
        if (t->next_item > first_new) {
            batch_flush(&t->out);
            double t1 = eng_now();
            for (int64_t j = first_new; j < t->next_item; j++) {
                item_t *it = &t->items[j % t->slots];
                it->first_sent = it->last_sent = t1;
                /* a silent item's timer waits for a sign that its result is lost (arm_silent) */
                it->timer_from = silent(t, j) ? INFINITY : t1;
                it->timer = e->rto.rto;
            }
            if (first_new == 0)
                t->first_sent = t1;
            wake = fmin(wake, t1 + e->rto.rto);
            stats->send_s += t1 - t0;
        }
        /* Results kept from before these items were made: taken now, as if they came now. */
        early_t *kept = e->early;
        int took = 0;
        for (int64_t j = first_new; j < t->next_item; j++) {
            int64_t seq = first_seq + j, i = seq % window;
            if (kept->seq[i] != seq)
                continue;
            kept->seq[i] = -1;
            if (!silent(t, j)) {         /* its own packet went, so its answer is still to come */
                stats->duplicate_results++;
                continue;
            }
            stats->early_results++;
            took += on_result(t, kept->data + (size_t)i * kept->packet, kept->len[i], &wake, &last_progress);
        }
        batch_flush(&t->out);
        if (took)
            continue;                    /* answered items free the window: make more before waiting */
        if (t->done) {
            if (t->window_acks)
                send_window_acks(t, 1);
            return;
        }
        if (t->eager)
            wake = fmin(wake, arm_silent(t, -1));
        /* Results already here come first: a worker that was not scheduled for a while must
           not take its own lateness for the switch's. */
        if (t->window_acks && drained)
            send_window_acks(t, 1);      /* about to wait: first what the others may wait for */
        t0 = eng_now();
        int got = recv_some(t->in, e->fd, fmax(0.0, wake - t0), -1, drained, spin, t->in_flight >= COALESCE_MIN);
        drained = got < BATCH;
        int progress = 0;
        for (int i = 0; i < got; i++) {
            int len;
            const struct sockaddr_in *from;
            const uint8_t *data = recv_data(t->in, i, &len, &from);
            if (from->sin_addr.s_addr != t->agg.sin_addr.s_addr || from->sin_port != t->agg.sin_port)
                continue;            /* another host sending look-alike results straight to this worker */
            progress |= on_result(t, data, len, &wake, &last_progress);
        }
        batch_flush(&t->out);
        double t1 = eng_now();
        stats->wait_s += t1 - t0;
        if (!progress && t1 >= wake) {
            wake = check_timers(t, last_progress, first_seq + t->next_item - 1);
            stats->retransmit_s += eng_now() - t1;
            if (wake < 0)
                return;
        }
    }
}

/* ---- before and after ---- */

/* The agreed exponents of the last KEPT_BASES float calls of distinct lengths, newest last: a
   training step's buckets come round in the same order with the same lengths. */
typedef struct {
    int count;
    int64_t len[KEPT_BASES];
    int16_t *exps[KEPT_BASES];
} bases_t;

/* The first window's bases (hosts/agent.py _first_guess): a kept call of the same length's agreed
   exponents, per chunk, with all-zero chunks at that call's largest; else the newest call's largest
   for every chunk; 0 before any float call. */
static void first_guesses(call_t *t)
{
    inc_engine *e = t->e;
    const bases_t *b = e->bases;
    int have = b != NULL && b->count > 0, at = have ? b->count - 1 : -1;
    for (int i = 0; have && i < b->count; i++)
        if (b->len[i] == t->m)
            at = i;
    int same = have && b->len[at] == t->m;
    const int16_t *basis = have ? b->exps[at] : NULL;
    t->known = same ? t->m : (t->m < e->window ? t->m : e->window);
    int64_t largest = EXPONENT_MIN;
    for (int64_t c = 0; have && c < b->len[at]; c++)
        largest = basis[c] > largest ? basis[c] : largest;
    int64_t fallback = largest > EXPONENT_MIN ? largest : 0;
    for (int64_t c = 0; c < t->known; c++) {
        int64_t guess = !have ? 0 : same && basis[c] > EXPONENT_MIN ? basis[c] : fallback;
        t->used[c] = (int16_t)bounded_guess(guess + e->exponent_margin);
    }
}

/* Keep this call's agreed exponents as the newest, in place of a kept call of its length, else of
   the oldest when KEPT_BASES are kept (hosts/agent.py _remember). */
static void remember_basis(inc_engine *e, const int16_t *agreed, int64_t m)
{
    bases_t *b = e->bases;
    if (b == NULL && (b = e->bases = calloc(1, sizeof *b)) == NULL)
        return;
    int at = 0;
    while (at < b->count && b->len[at] != m)
        at++;
    int16_t *keep = NULL;
    if (at < b->count || b->count == KEPT_BASES) {
        at = at < b->count ? at : 0;
        keep = b->exps[at];
        for (int i = at; i < b->count - 1; i++) {
            b->exps[i] = b->exps[i + 1];
            b->len[i] = b->len[i + 1];
        }
        b->count--;
    }
    int16_t *grown = realloc(keep, (size_t)m * sizeof *grown);
    if (grown == NULL) {
        free(keep);
        return;
    }
    memcpy(grown, agreed, (size_t)m * sizeof *grown);
    b->exps[b->count] = grown;
    b->len[b->count++] = m;
}

static void free_bases(bases_t *b)
{
    for (int i = 0; b != NULL && i < b->count; i++)
        free(b->exps[i]);
    free(b);
}

static int cmp_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void finish_float(call_t *t)
{
    inc_engine *e = t->e;
    inc_call *c = t->c;
    double t0 = eng_now();
    if (t->has_first_pass_done && c->stats.redone_chunks)
        c->stats.exponent_s = fmax(0.0, t0 - t->first_pass_done);
    remember_basis(e, t->agreed, t->m);
    if (t->failed_count) {
        qsort(t->failed, (size_t)t->failed_count, sizeof *t->failed, cmp_int64);
        memcpy(c->bad_chunks, t->failed, (size_t)t->failed_count * sizeof *t->failed);
        c->bad_count = t->failed_count;
        c->status = ENG_FLOAT_OVERFLOW;
        return;
    }
    /* The sums, exact in doubles, rounded once into the dtype; each input fits its dtype, their
       sum need not (N values near 2^127, or beyond float16's 65504). Only the chunks whose sums
       came to this worker: in a ReduceScatter, 1/N of them. */
    size_t width = c->dtype == ENG_DTYPE_FLOAT32 ? 4 : 2;
    for (int64_t j0 = 0, j1; j0 < t->m; j0 = j1) {
        int mine = gets_sum(t, j0);
        for (j1 = j0 + 1; j1 < t->m && gets_sum(t, j1) == mine; j1++)
            ;
        int64_t from = j0 * t->k, count = (j1 == t->m ? c->size : j1 * t->k) - from;
        uint8_t *out = (uint8_t *)c->out + (size_t)from * width;
        if (!mine) {
            memset(out, 0, (size_t)count * width);      /* +0.0, as the zero sums of an ACK give */
            continue;
        }
        double *values = t->values + from;               /* the inputs are sent: reused */
        eng_dequantize(t->sums + from, j1 - j0, t->k, t->used + j0, e->num_workers, values);
        eng_narrow(c->dtype, values, count, out);
        eng_widen(c->dtype, out, count, values);         /* which rounded sums are finite */
        for (int64_t i = from; i < from + count; i++) {
            if (!isfinite(t->values[i])) {
                c->bad_chunks[c->bad_count++] = i / t->k;
                i = (i / t->k + 1) * t->k - 1;           /* on to the next chunk */
            }
        }
    }
    if (c->bad_count)
        c->status = ENG_BEYOND_RANGE;
    c->stats.finish_s = eng_now() - t0;
}

static void finish_words(call_t *t)
{
    inc_call *c = t->c;
    double t0 = eng_now();
    if (t->bad_count) {
        c->bad_count = t->bad_count;
        c->status = c->kind == ENG_KIND_ORDERED ? ENG_NOT_A_NUMBER : ENG_INT32_OVERFLOW;
        return;
    }
    if (c->kind == ENG_KIND_ORDERED && c->dtype == ENG_DTYPE_FLOAT32)
        eng_to_ordered(t->sums, c->size, c->out);
    else
        memcpy(c->out, t->sums, (size_t)c->size * 4);
    c->stats.finish_s = eng_now() - t0;
}

#define TAKE(ptr, count) \
    do { (ptr) = (void *)(arena + used); used += ((size_t)(count) * sizeof *(ptr) + 15) & ~(size_t)15; } while (0)

static int run_call(inc_engine *e, inc_call *c)
{
    call_t t = {.e = e, .c = c, .k = e->k, .started = eng_now()};
    c->status = ENG_OK;
    c->bad_count = 0;
    memset(&c->stats, 0, sizeof c->stats);
    if (c->size <= 0)
        return c->status;
    t.m = (c->size + t.k - 1) / t.k;
    t.size_last = c->size - (t.m - 1) * t.k;
    t.first_sent = t.started;
    t.eager = e->eager && c->kind == ENG_KIND_GATHER && c->collective == COLL_BROADCAST;
    t.lag = e->window / 4;
    t.period = e->window - t.lag;
    t.first_gate = e->after_eager ? -1 : (t.period < t.m ? t.period : t.m) - 1;
    t.window_acks = e->takes_window_acks && c->collective == COLL_REDUCE && c->window_acks_pay;
    int is_float = c->kind == ENG_KIND_FLOAT;
    int64_t max_items = is_float ? 2 * t.m : t.m;
    t.slots = max_items < e->window ? max_items : e->window;
    size_t packet = (size_t)(INC_HEADER_SIZE + 4 * t.k);
    if (e->receive == NULL) {
        recv_batch *in = malloc(sizeof *in);
        if (in == NULL || recv_init(in, packet) != 0) {
            free(in);
            c->status = ENG_NO_MEMORY;
            return c->status;
        }
        e->receive = in;
    }
    t.in = e->receive;
    if (e->early == NULL && (e->early = early_new(e->window, packet)) == NULL) {
        c->status = ENG_NO_MEMORY;
        return c->status;
    }
    /* The call's memory, in one block kept by the engine: sizes first, then the pointers into it. */
    size_t need = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass && need > e->scratch_size) {
            free(e->scratch);
            e->scratch_size = 0;
            e->scratch = malloc(need);
            if (e->scratch == NULL) {
                c->status = ENG_NO_MEMORY;
                return c->status;
            }
            e->scratch_size = need;
        }
        uint8_t *arena = pass ? e->scratch : NULL;
        size_t used = 0;
        TAKE(t.items, t.slots);
        uint8_t *payloads;
        TAKE(payloads, (size_t)t.slots * packet);
        TAKE(t.sums, t.m * t.k);
        TAKE(t.quantized, t.k < 2 ? 2 : t.k);
        if (c->kind == ENG_KIND_ORDERED) {
            TAKE(t.words, t.m * t.k);
            TAKE(t.has_nan, t.m);
        }
        if (is_float) {
            TAKE(t.values, t.m * t.k);
            TAKE(t.fits_at, t.m);
            TAKE(t.local, t.m);
            TAKE(t.agreed, t.m);
            TAKE(t.used, t.m);
            TAKE(t.item_chunk, max_items);
            TAKE(t.item_basis, max_items);
            TAKE(t.item_redo, max_items);
            TAKE(t.redo_at, t.m);
            TAKE(t.redo_chunk, t.m);
            TAKE(t.failed, t.m);
        }
        if (t.window_acks) {
            TAKE(t.owned, max_items);
            TAKE(t.window_ack, packet);
        }
        if (!pass) {
            need = used;
            continue;
        }
        memset(t.items, 0, (size_t)t.slots * sizeof *t.items);
        for (int64_t i = 0; i < t.slots; i++)
            t.items[i].payload = payloads + (size_t)i * packet;
        memset(t.sums, 0, (size_t)(t.m * t.k) * sizeof *t.sums);   /* zeros stay where only an ACK came back */
        if (t.window_acks)
            memset(t.owned, 0, (size_t)max_items * sizeof *t.owned);
        t.agg = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = e->agg_port, .sin_addr.s_addr = e->agg_addr};
        t.out = (send_batch){.fd = e->fd, .counters = &e->counters};
        if (c->kind == ENG_KIND_ORDERED) {
            const int32_t *bits = c->data;
            if (c->dtype == ENG_DTYPE_FLOAT32)
                eng_to_ordered(bits, c->size, t.words);
            else
                memcpy(t.words, bits, (size_t)c->size * 4);
            memset(t.has_nan, 0, (size_t)t.m);
            for (int64_t i = 0; c->dtype == ENG_DTYPE_FLOAT32 && i < c->size; i++) {
                uint32_t b = (uint32_t)bits[i];
                if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x7FFFFFu))
                    t.has_nan[i / t.k] = 1;
            }
        }
        if (is_float) {
            memset(t.values, 0, (size_t)(t.m * t.k) * sizeof *t.values);
            eng_widen(c->dtype, c->data, c->size, t.values);
            eng_chunk_exponents(t.values, t.m, t.k, t.fits_at);
            for (int64_t ch = 0; ch < t.m; ch++) {
                t.local[ch] = t.fits_at[ch] < EXPONENT_MAX ? t.fits_at[ch] : EXPONENT_MAX;
                t.agreed[ch] = EXPONENT_MIN;
                t.used[ch] = 0;
            }
            first_guesses(&t);
        }
        exchange(&t);
        e->next_seq += (uint64_t)t.next_item;
        if (t.done)
            e->after_eager = t.eager;
        if (c->status == ENG_OK)
            (is_float ? finish_float : finish_words)(&t);
    }
    c->stats.total_s = eng_now() - t.started;
    return c->status;
}

int inc_run(inc_engine *e, inc_call *c)
{
    int64_t waits = e->counters.waits, dropped = e->counters.dropped, samples = e->rto.samples;
    run_call(e, c);
    /* The rest of hosts/agent.py's CallStats, so that Python reads it from here only if asked. */
    eng_stats *s = &c->stats;
    s->send_waits = e->counters.waits - waits;
    s->send_drops = e->counters.dropped - dropped;
    s->rtt_samples = e->rto.samples - samples;
    s->has_srtt = e->rto.has_srtt;
    s->srtt_s = e->rto.srtt;
    s->final_rto_s = e->rto.rto;
    s->final_window = e->cwnd.cwnd;
    return c->status;
}

inc_engine *inc_new(void)
{
    inc_engine *e = calloc(1, sizeof *e);
    if (e != NULL)
        e->live_since = INFINITY;
    return e;
}

void inc_free(inc_engine *e)
{
    if (e == NULL)
        return;
    free_bases(e->bases);
    free(e->scratch);
    if (e->receive != NULL)
        recv_free(e->receive);
    free(e->receive);
    early_free(e->early);
    free(e);
}
