/* One rank of the host ring (hosts/ring.py's RingWorker): the same packets, acks and timers.
 * During a call the calling thread drives the socket itself (no thread hand-off per chunk);
 * between calls a service thread acknowledges the previous rank's chunks and retransmits this
 * rank's, as hosts/ring.py's does (a rank whose call has returned may still owe its successor
 * a lost chunk). The two hand the socket over through an eventfd and `in_call`.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#define DUP_THRESHOLD 3              /* chunks selectively acked above a hole before it is sent again */
#define MAX_AHEAD (1 << 20)          /* chunks received ahead of the call's next one, at most */

typedef struct {
    int64_t seq;
    uint8_t *payload;
    int64_t len;                     /* the payload's bytes */
    double sent, deadline;
    int64_t tries;
} unacked_t;

struct ring_engine {
    ring_config cfg;
    int prev, next;
    struct sockaddr_in *peers;
    int64_t packet;                  /* bytes of a data packet or an ack */
    pthread_mutex_t mu;
    pthread_cond_t idle;             /* the service thread waits on it during a call */
    pthread_t thread;
    int thread_started, stop, in_call;
    int service_fd, call_fd;         /* eventfds: wake the service thread; wake the caller */
    eng_rto rto;
    eng_cwnd cwnd;
    ring_stats stats;
    eng_counters counters;
    /* to the next rank: chunks not yet acknowledged, in seq order */
    int64_t send_next;
    unacked_t *unacked;
    int64_t unacked_count;
    uint8_t *payloads, **free_payloads;
    int64_t free_count;
    /* from the previous rank: chunks from seq recv_next on, in a ring of `cap` rows */
    int64_t recv_next, cumulative, recv_cap, out_of_order, stored;
    int32_t *rows;
    uint8_t *present;
    int64_t ack_pending;
    double ack_due;
    uint8_t *ack_payload;
    send_batch out;
    recv_batch in, service_in;
};

/* ---- the receiving side ---- */

static int64_t row_at(const ring_engine *r, int64_t seq)
{
    return seq % r->recv_cap;
}

static int is_present(const ring_engine *r, int64_t seq)
{
    return seq >= r->recv_next && seq < r->recv_next + r->recv_cap && r->present[row_at(r, seq)];
}

/* Room for rows up to `seq` (the ring doubles, the rows keep their seqs); 0 if too far ahead. */
static int reserve(ring_engine *r, int64_t seq)
{
    if (seq < r->recv_next + r->recv_cap)
        return 1;
    if (seq - r->recv_next >= MAX_AHEAD)
        return 0;
    int64_t cap = r->recv_cap;
    while (seq >= r->recv_next + cap)
        cap *= 2;
    int64_t k = r->cfg.k;
    int32_t *rows = malloc((size_t)(cap * k) * sizeof *rows);
    uint8_t *present = calloc((size_t)cap, 1);
    if (rows == NULL || present == NULL) {
        free(rows);
        free(present);
        return 0;
    }
    for (int64_t s = r->recv_next; s < r->recv_next + r->recv_cap; s++) {
        if (!r->present[row_at(r, s)])
            continue;
        memcpy(rows + (s % cap) * k, r->rows + row_at(r, s) * k, (size_t)k * sizeof *rows);
        present[s % cap] = 1;
    }
    free(r->rows);
    free(r->present);
    r->rows = rows;
    r->present = present;
    r->recv_cap = cap;
    return 1;
}

/* The words a ring packet needs of its K `words`: up to the last nonzero one, its count; it
   carries them in whole blocks (data_elements), and the receiver takes the rest for zeros. So a
   short tensor's padding costs no bytes, as an INC packet carries only its count's blocks
   (hosts/ring.py used_words). */
static int64_t used_words(const uint8_t *words, int64_t k)
{
    int64_t used = k;
    while (used > 0 && !memcmp(words + 4 * (used - 1), "\0\0\0\0", 4))
        used--;
    return used;
}

static void send_ack(ring_engine *r)
{
    int64_t k = r->cfg.k, sack = 32 * k;
    uint8_t *p = r->ack_payload;
    memset(p + INC_HEADER_SIZE, 0, (size_t)(4 * k));
    for (int64_t d = 0; r->out_of_order && d < sack; d++) {
        if (is_present(r, r->cumulative + 1 + d)) {
            uint8_t *word = p + INC_HEADER_SIZE + 4 * (d / 32);      /* big-endian word d / 32, bit d % 32 */
            word[3 - (d % 32) / 8] |= (uint8_t)(1u << (d % 8));
        }
    }
    int64_t used = used_words(p + INC_HEADER_SIZE, k);
    inc_header h = {.opcode = OP_RING_ACK, .job_id = r->cfg.job_id, .worker_id = r->cfg.rank,
                    .count = (int)used, .seq = (uint32_t)r->cumulative};
    header_pack(&h, p);
    r->ack_pending = 0;
    r->ack_due = INFINITY;
    r->stats.acks++;
    /* Alone, now: the ack's buffer is reused by the next one. */
    send_batch one = {.fd = r->cfg.fd, .counters = &r->counters};
    batch_add(&one, p, (size_t)(INC_HEADER_SIZE + 4 * data_elements(used, k)), &r->peers[r->prev]);
    batch_flush(&one);
}

/* A chunk from the previous rank: kept, and acknowledged now if it was out of order or a
   duplicate (the sender may be missing an ack) or asks for it (it filled the sender's window),
   else with the next delayed ack. */
static void take_chunk(ring_engine *r, int64_t seq, int flags, const uint8_t *elements, int64_t count)
{
    int in_order = seq == r->cumulative;
    int fresh = in_order || (seq > r->cumulative && !is_present(r, seq));
    if (fresh && reserve(r, seq)) {
        int32_t *row = r->rows + row_at(r, seq) * r->cfg.k;
        int64_t n = data_elements(count, r->cfg.k);
        for (int64_t i = 0; i < n; i++)
            row[i] = (int32_t)get_be32(elements + 4 * i);
        memset(row + n, 0, (size_t)(4 * (r->cfg.k - n)));
        r->present[row_at(r, seq)] = 1;
        r->out_of_order++;
        r->stored++;
        while (is_present(r, r->cumulative)) {
            r->cumulative++;
            r->out_of_order--;
        }
    }
    if (in_order) {
        r->ack_pending++;
        r->ack_due = fmin(r->ack_due, eng_now() + r->cfg.ack_delay);
    }
    if (!in_order || r->ack_pending >= r->cfg.chunks_per_ack || (flags & FLAG_ACK_NOW))
        send_ack(r);
}

/* ---- the sending side ---- */

static void resend(ring_engine *r, unacked_t *u, double now)
{
    u->tries++;
    u->sent = now;
    u->deadline = now + r->rto.rto;
    r->stats.retransmissions++;
    batch_add(&r->out, u->payload, (size_t)u->len, &r->peers[r->next]);
}

static void release(ring_engine *r, int64_t i)
{
    r->free_payloads[r->free_count++] = r->unacked[i].payload;
    memmove(r->unacked + i, r->unacked + i + 1, (size_t)(r->unacked_count - i - 1) * sizeof *r->unacked);
    r->unacked_count--;
}

static int sacked(const uint8_t *bitmap, int64_t d)
{
    return bitmap[4 * (d / 32) + 3 - (d % 32) / 8] >> (d % 8) & 1;
}

/* Release what an ack covers (its `words` of bitmap; the rest are zeros), timing the round trip
   of the newest chunk sent once (Karn's rule); a hole with DUP_THRESHOLD chunks acked above it is
   sent again now. */
static void take_ack(ring_engine *r, int64_t cumulative, const uint8_t *bitmap, int64_t words)
{
    int64_t sack = 32 * words;
    double now = eng_now();
    double newest_once = -1;
    for (int64_t i = 0; i < r->unacked_count;) {
        unacked_t *u = &r->unacked[i];
        int64_t d = u->seq - cumulative - 1;
        if (u->seq < cumulative || (d >= 0 && d < sack && sacked(bitmap, d))) {
            if (u->tries == 1)
                newest_once = u->sent;
            cwnd_on_ack(&r->cwnd, u->seq);
            release(r, i);
            continue;
        }
        i++;
    }
    /* hosts/ring.py samples before it releases; the order does not change the estimator. */
    if (newest_once >= 0)
        rto_sample(&r->rto, now - newest_once);
    int64_t count = 0, hole_below = -1;
    for (int64_t d = sack - 1; d >= 0 && count < DUP_THRESHOLD; d--) {
        if (sacked(bitmap, d) && ++count == DUP_THRESHOLD)
            hole_below = cumulative + 1 + d;          /* the DUP_THRESHOLD-th highest seq acked */
    }
    if (hole_below < 0)
        return;
    for (int64_t i = 0; i < r->unacked_count; i++) {
        unacked_t *u = &r->unacked[i];
        if (u->tries == 1 && u->seq < hole_below) {
            cwnd_on_loss(&r->cwnd, r->send_next - 1);
            resend(r, u, now);
        }
    }
}

static void take_datagram(ring_engine *r, const uint8_t *data, int len)
{
    if (len < INC_HEADER_SIZE)
        return;
    inc_header h;
    header_unpack(data, &h);
    if (h.job_id != r->cfg.job_id || h.count > r->cfg.k || len < INC_HEADER_SIZE + 4 * data_elements(h.count, r->cfg.k))
        return;
    if (h.opcode == OP_RING_ACK)
        take_ack(r, h.seq, data + INC_HEADER_SIZE, h.count);
    else if (h.opcode == OP_RING && h.worker_id == r->prev)
        take_chunk(r, h.seq, h.flags, data + INC_HEADER_SIZE, h.count);
}

/* The delayed ack if due; chunks whose timer expired (one backoff and window cut for all of
   them) sent again, or given up after max_retries (the receiver has them, or its own wait
   reports the loss). Returns when something is next due. */
static double service(ring_engine *r)
{
    double now = eng_now();
    if (now >= r->ack_due)
        send_ack(r);
    double longest = -1;
    for (int64_t i = 0; i < r->unacked_count; i++)
        if (r->unacked[i].deadline <= now)
            longest = fmax(longest, r->unacked[i].deadline - r->unacked[i].sent);
    if (longest >= 0) {
        rto_backoff(&r->rto, longest);
        cwnd_on_timeout(&r->cwnd, r->send_next - 1);
        for (int64_t i = 0; i < r->unacked_count;) {
            unacked_t *u = &r->unacked[i];
            if (u->deadline > now) {
                i++;
            } else if (u->tries > r->cfg.max_retries) {
                release(r, i);
            } else {
                resend(r, u, now);
                i++;
            }
        }
    }
    batch_flush(&r->out);
    double wake = r->ack_due;
    for (int64_t i = 0; i < r->unacked_count; i++)
        wake = fmin(wake, r->unacked[i].deadline);
    return wake;
}

static void drain(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof v) > 0)
        ;
}

static void kick(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* Read what has come (waiting up to `timeout`, the first `spin` seconds awake; `many`: as
   recv_some's) and take it; the lock is held on entry and exit, not during the wait. */
static void receive(ring_engine *r, recv_batch *in, double timeout, int wake_fd, double spin, int many)
{
    pthread_mutex_unlock(&r->mu);
    int got = recv_some(in, r->cfg.fd, timeout, wake_fd, 0, spin, many);
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < got; i++) {
        int len;
        const struct sockaddr_in *from;
        const uint8_t *data = recv_data(in, i, &len, &from);
        take_datagram(r, data, len);
    }
    batch_flush(&r->out);            /* before a released chunk's buffer can carry a new one */
    if (got > 0 && r->in_call && wake_fd == r->service_fd)
        kick(r->call_fd);             /* the caller may be waiting for what this thread just took */
}

static void *serve(void *arg)
{
    ring_engine *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        if (r->in_call) {
            pthread_cond_wait(&r->idle, &r->mu);
            continue;
        }
        double wake = service(r);
        receive(r, &r->service_in, fmax(0.0, wake - eng_now()), r->service_fd, 0.0, 0);
        drain(r->service_fd);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- a call ---- */

/* Drive the socket until there is window space (for_acks) or every chunk below `want_seq` has
   come, failing after a stall with no progress (no chunk in, no ack) for timeout * (max_retries + 1). */
static int wait_until(ring_engine *r, ring_call *c, int for_acks, int64_t want_seq)
{
    double limit = r->cfg.timeout * (double)(r->cfg.max_retries + 1);
    double since = eng_now();
    int64_t seen[3] = {r->cumulative, r->stored, r->unacked_count};
    for (;;) {
        if (for_acks ? r->unacked_count < cwnd_allowed(&r->cwnd) : r->cumulative >= want_seq)
            return 1;
        double wake = service(r);
        double now = eng_now();
        /* What the call waits for: acks of a full window, or the chunks still to come. */
        int64_t due = for_acks ? r->unacked_count : want_seq - r->cumulative;
        receive(r, &r->in, fmax(0.0, fmin(wake, since + limit) - now), r->call_fd,
                call_spin(c->chunk_count, r->cfg.spin, r->cfg.spin_large), due >= COALESCE_MIN);
        drain(r->call_fd);
        now = eng_now();
        if (r->cumulative != seen[0] || r->stored != seen[1] || r->unacked_count != seen[2]) {
            seen[0] = r->cumulative, seen[1] = r->stored, seen[2] = r->unacked_count;
            since = now;
        } else if (now - since >= limit) {
            c->status = ENG_TIMEOUT;
            c->timeout_waiting_for_acks = for_acks;
            c->timeout_peer = for_acks ? r->next : r->prev;
            c->timeout_waited = limit;
            return 0;
        }
    }
}

static int send_rows(ring_engine *r, ring_call *c, const int32_t *rows, int64_t count)
{
    int64_t k = r->cfg.k;
    for (int64_t i = 0; i < count; i++) {
        if (r->unacked_count >= cwnd_allowed(&r->cwnd)) {
            batch_flush(&r->out);
            if (!wait_until(r, c, 1, 0))
                return 0;
        }
        unacked_t *u = &r->unacked[r->unacked_count++];
        u->payload = r->free_payloads[--r->free_count];
        u->seq = r->send_next++;
        /* The chunk that fills the window asks for its ack now: the sender waits for it, and a
           receiver that waited for chunks_per_ack in-order chunks or its ack delay would stall
           every window below chunks_per_ack (after a cut) on that delay. */
        int ack_now = r->unacked_count >= cwnd_allowed(&r->cwnd);
        for (int64_t j = 0; j < k; j++)
            put_be32(u->payload + INC_HEADER_SIZE + 4 * j, (uint32_t)rows[i * k + j]);
        int64_t used = used_words(u->payload + INC_HEADER_SIZE, k);
        inc_header h = {.opcode = OP_RING, .flags = ack_now ? FLAG_ACK_NOW : 0, .job_id = r->cfg.job_id,
                        .worker_id = r->cfg.rank, .count = (int)used, .seq = (uint32_t)u->seq};
        header_pack(&h, u->payload);
        u->len = INC_HEADER_SIZE + 4 * data_elements(used, k);
        u->sent = eng_now();
        u->deadline = u->sent + r->rto.rto;
        u->tries = 1;
        r->stats.chunks++;
        batch_add(&r->out, u->payload, (size_t)u->len, &r->peers[r->next]);
    }
    batch_flush(&r->out);
    return 1;
}

/* The previous rank's next `count` chunks, in order, into `rows`: added (as int32 wrapping, or
   float32) or copied. */
static int take_rows(ring_engine *r, ring_call *c, int32_t *rows, int64_t count, int add)
{
    if (count == 0)
        return 1;
    if (!wait_until(r, c, 0, r->recv_next + count))
        return 0;
    int64_t k = r->cfg.k;
    for (int64_t i = 0; i < count; i++, r->recv_next++) {
        const int32_t *in = r->rows + row_at(r, r->recv_next) * k;
        int32_t *out = rows + i * k;
        r->present[row_at(r, r->recv_next)] = 0;
        if (!add) {
            memcpy(out, in, (size_t)k * sizeof *out);
        } else if (c->dtype == ENG_DTYPE_FLOAT32) {
            for (int64_t j = 0; j < k; j++) {
                float a, b;
                memcpy(&a, out + j, sizeof a);
                memcpy(&b, in + j, sizeof b);
                a += b;
                memcpy(out + j, &a, sizeof a);
            }
        } else {
            for (int64_t j = 0; j < k; j++)
                out[j] = (int32_t)((uint32_t)out[j] + (uint32_t)in[j]);
        }
    }
    return 1;
}

/* N - 1 steps over segments cut at `bounds`: at step s rank r sends segment r + first - s and
   receives the one before it, adding it to its own or taking it. */
static int run_steps(ring_engine *r, ring_call *c, int first, int add)
{
    int n = r->cfg.num_workers, rank = r->cfg.rank;
    int64_t k = r->cfg.k;
    int32_t *rows = c->rows;
    for (int step = 0; step < n - 1; step++) {
        int send_seg = (((rank + first - step) % n) + n) % n;
        int recv_seg = (send_seg - 1 + n) % n;
        int64_t s0 = c->bounds[send_seg], s1 = c->bounds[send_seg + 1];
        int64_t r0 = c->bounds[recv_seg], r1 = c->bounds[recv_seg + 1];
        if (!send_rows(r, c, rows + s0 * k, s1 - s0) || !take_rows(r, c, rows + r0 * k, r1 - r0, add))
            return 0;
    }
    return 1;
}

static void run_op(ring_engine *r, ring_call *c)
{
    int n = r->cfg.num_workers, rank = r->cfg.rank;
    int64_t k = r->cfg.k;
    int32_t *rows = c->rows;
    if (c->op == RING_OP_STEPS) {
        run_steps(r, c, c->first, c->add);
        return;
    }
    if (c->op == RING_OP_ALLREDUCE) {
        /* Reduce-scatter leaves rank r with segment r + 1 summed; all-gather passes the sums on. */
        if (run_steps(r, c, 0, 1))
            run_steps(r, c, 1, 0);
        return;
    }
    /* Broadcast: a pipeline from the root, each rank passing a chunk on as soon as it has it.
       Reduce: a pipeline that ends at the root, each rank adding its chunk to the one it got. */
    int position = c->op == RING_OP_BROADCAST ? ((rank - c->root) % n + n) % n : ((rank - c->root - 1) % n + n) % n;
    for (int64_t i = 0; i < c->chunk_count; i++) {
        if (position > 0 && !take_rows(r, c, rows + i * k, 1, c->op == RING_OP_REDUCE))
            return;
        if (position < n - 1 && !send_rows(r, c, rows + i * k, 1))
            return;
    }
}

int ring_run(ring_engine *r, ring_call *c)
{
    c->status = ENG_OK;
    pthread_mutex_lock(&r->mu);
    if (r->stop) {
        pthread_mutex_unlock(&r->mu);
        return c->status = ENG_CLOSED;
    }
    r->in_call = 1;
    kick(r->service_fd);              /* out of its wait on the socket, into its wait on `idle` */
    run_op(r, c);
    batch_flush(&r->out);
    r->in_call = 0;
    pthread_cond_signal(&r->idle);
    pthread_mutex_unlock(&r->mu);
    return c->status;
}

/* ---- life ---- */

ring_engine *ring_new(const ring_config *cfg, char *error, int error_size)
{
    ring_engine *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(error, (size_t)error_size, "no memory");
        return NULL;
    }
    r->cfg = *cfg;
    r->cfg.peer_addrs = NULL;
    r->cfg.peer_ports = NULL;
    r->service_fd = r->call_fd = -1;
    int n = cfg->num_workers;
    r->prev = (cfg->rank - 1 + n) % n;
    r->next = (cfg->rank + 1) % n;
    r->packet = INC_HEADER_SIZE + 4 * cfg->k;
    r->recv_cap = 64;
    r->ack_due = INFINITY;
    r->peers = calloc((size_t)cfg->peer_count, sizeof *r->peers);
    r->unacked = calloc((size_t)cfg->window, sizeof *r->unacked);
    r->payloads = malloc((size_t)(cfg->window * r->packet));
    r->free_payloads = calloc((size_t)cfg->window, sizeof *r->free_payloads);
    r->rows = malloc((size_t)(r->recv_cap * cfg->k) * sizeof *r->rows);
    r->present = calloc((size_t)r->recv_cap, 1);
    r->ack_payload = malloc((size_t)r->packet);
    if (!r->peers || !r->unacked || !r->payloads || !r->free_payloads || !r->rows || !r->present
            || !r->ack_payload || recv_init(&r->in, (size_t)r->packet) || recv_init(&r->service_in, (size_t)r->packet)) {
        snprintf(error, (size_t)error_size, "no memory");
        ring_free(r);
        return NULL;
    }
    for (int64_t i = 0; i < cfg->peer_count; i++)
        r->peers[i] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = cfg->peer_ports[i],
                                           .sin_addr.s_addr = cfg->peer_addrs[i]};
    for (int64_t i = 0; i < cfg->window; i++)
        r->free_payloads[r->free_count++] = r->payloads + i * r->packet;
    /* A delayed ack waits up to ack_delay: a timeout below twice that would resend what arrived. */
    rto_init(&r->rto, cfg->timeout, 2 * cfg->ack_delay, cfg->max_rto);
    cwnd_init(&r->cwnd, cfg->window, 1.0);
    r->out = (send_batch){.fd = cfg->fd, .counters = &r->counters};
    r->service_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->call_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->service_fd < 0 || r->call_fd < 0 || pthread_mutex_init(&r->mu, NULL) || pthread_cond_init(&r->idle, NULL)) {
        snprintf(error, (size_t)error_size, "%s", strerror(errno));
        ring_free(r);
        return NULL;
    }
    int err = pthread_create(&r->thread, NULL, serve, r);
    if (err) {
        snprintf(error, (size_t)error_size, "cannot start the ring's service thread: %s", strerror(err));
        ring_free(r);
        return NULL;
    }
    r->thread_started = 1;
    return r;
}

void ring_close(ring_engine *r, double linger)
{
    if (!r->thread_started)
        return;
    double until = eng_now() + linger;
    pthread_mutex_lock(&r->mu);
    /* The previous rank may be lingering for the last chunks' delayed ack: it goes now, and
       again for any chunk taken while this rank lingers for its own acks. */
    if (r->ack_pending)
        send_ack(r);
    while (r->unacked_count && eng_now() < until) {    /* the service thread is still retransmitting */
        pthread_mutex_unlock(&r->mu);
        struct timespec ts = {.tv_nsec = 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&r->mu);
    }
    if (r->ack_pending)
        send_ack(r);
    r->stop = 1;
    pthread_cond_signal(&r->idle);
    pthread_mutex_unlock(&r->mu);
    kick(r->service_fd);
    pthread_join(r->thread, NULL);
    r->thread_started = 0;
}

void ring_free(ring_engine *r)
{
    if (r == NULL)
        return;
    ring_close(r, 0);
    if (r->service_fd >= 0)
        close(r->service_fd);
    if (r->call_fd >= 0)
        close(r->call_fd);
    recv_free(&r->in);
    recv_free(&r->service_in);
    free(r->peers);
    free(r->unacked);
    free(r->payloads);
    free(r->free_payloads);
    free(r->rows);
    free(r->present);
    free(r->ack_payload);
    free(r);
}

void ring_read(ring_engine *r, ring_stats *stats, eng_rto *rto, eng_cwnd *cwnd, eng_counters *counters)
{
    pthread_mutex_lock(&r->mu);
    *stats = r->stats;
    *rto = r->rto;
    *cwnd = r->cwnd;
    *counters = r->counters;
    pthread_mutex_unlock(&r->mu);
}
