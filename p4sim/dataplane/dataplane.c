/* p4sim's C data plane: the packet loop between AF_PACKET sockets and a compiled pipeline.
 *
 * One loop thread (dp_run, called from a Python thread with the GIL released) polls every port,
 * takes what arrived from the port's receive ring (PACKET_MMAP: the kernel copies each frame in,
 * no system call per frame), writes pcap-in, runs each frame through the current pipeline
 * (p4sim_pipeline.h) and sends its outputs in batches per port (sendmmsg), writing pcap-out.
 * What Python must see goes up one queue that a Python thread drains (dp_next): frames for the
 * CPU port (PacketIns), frames to run through a Python pipeline when no compiled one is set,
 * and log lines. A slow target (a service rate, a bounded queue, added latency) is served by
 * the same loop on a schedule. Pipelines are swapped while the loop runs: dp_set_pipeline
 * returns once the loop can no longer be inside the old one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "p4sim_pipeline.h"

#define MAX_FRAME (65535 + 64)     /* as the Python loop reads: any frame a veth can carry, GRO'd too */
#define BATCH 64                   /* frames taken from a port's ring in a row; frames per sendmmsg */
/* A port's receive ring: 2048 slots of 2 KiB, a burst of 2048 frames of up to 1982 bytes (an
 * Ethernet MTU's fit whole). A bigger frame (jumbo) is also queued whole on the socket (up to
 * RCVBUF_BYTES of them) and read from there. */
#define RING_FRAME 2048
#define RING_BLOCK (128 << 10)
#define RING_BLOCKS 32
#define RCVBUF_BYTES (8 << 20)
#define UP_MAX_FRAMES 65536        /* frames waiting for Python (and their bytes, at most UP_MAX_BYTES); */
#define UP_MAX_BYTES (64 << 20)    /* more are dropped and counted */
#define UP_MAX_LOGS 1024           /* log lines waiting for Python; more are dropped */
#define MAX_LAG_SERVICES 4         /* as the Python slow target: a late wake-up is made up, a stall is not */
#define NS 1000000000LL
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

/* Kinds of what goes up to Python (dp_item.kind). */
enum { DP_UP_RX = 1, DP_UP_CPU = 2, DP_UP_LOG = 3 };
/* Log levels, as Python's logging numbers them. */
enum { DP_DEBUG = 10, DP_INFO = 20, DP_WARNING = 30 };

typedef struct dp_item {
    struct dp_item *next;
    int64_t t;          /* arrival (slow queue) or due time (latency queue), monotonic ns */
    int32_t kind;       /* DP_UP_*; for DP_UP_LOG `port` is the level */
    uint32_t port;
    uint32_t len;
    uint8_t data[];
} dp_item;

typedef struct dp_fifo {
    dp_item *head, *tail;
    uint32_t count;
} dp_fifo;

typedef struct dp_stats {
    uint64_t received, served, queue_drops, max_queued;   /* the slow target's */
    uint64_t rx, tx, no_port, oversized, send_errors, receive_errors, packet_ins, up_drops, ring_drops;
} dp_stats;

typedef struct dp_port {
    uint32_t number;
    int fd;
    uint8_t *ring;               /* mmap'ed receive ring, RING_BLOCKS * RING_BLOCK bytes */
    uint32_t ring_head;          /* the next slot to look at */
    char iface[32];
    FILE *pcap_in, *pcap_out;
    atomic_int last_errno;       /* last send error logged, and when: repeats within 1 s are counted only */
    _Atomic int64_t last_err_ns;
    struct mmsghdr tx[BATCH];
    struct iovec tx_iov[BATCH];
    unsigned tx_n;
} dp_port;

typedef struct dp_pipe {
    p4sim_process_fn fn;
    void *ctx;
} dp_pipe;

typedef struct p4sim_dataplane {
    dp_port *ports;
    unsigned nports, cap_ports;
    int64_t cpu_port;                /* -1: none */
    int debug;                       /* log per-frame drops (Python's logger is at DEBUG) */
    int wake_fd;                     /* eventfd: stop, or a delayed frame queued from Python */
    atomic_int stop;

    _Atomic(dp_pipe *) pipe;         /* NULL: frames go up to Python's pipeline */
    atomic_uint_fast64_t epoch;      /* odd while the loop may be inside a pipeline */

    uint8_t *big;                    /* a frame too big for a ring slot, read whole */
    p4sim_outbuf out;

    int slow;
    int64_t service_ns, latency_ns;
    uint32_t queue_depth;
    dp_fifo waiting;                 /* loop thread only */
    dp_item *in_service;
    int64_t busy_until;
    pthread_mutex_t delay_lock;      /* latency queue: the loop and Python's transmit append */
    dp_fifo delayed;

    pthread_mutex_t up_lock;
    pthread_cond_t up_cond;
    dp_fifo up;
    uint32_t up_frames, up_logs;
    uint64_t up_bytes;

    struct {
        atomic_uint_fast64_t received, served, queue_drops, max_queued;
        atomic_uint_fast64_t rx, tx, no_port, oversized, send_errors, receive_errors, packet_ins, up_drops;
        atomic_uint_fast64_t ring_drops;
    } st;
} p4sim_dataplane;

#define COUNT(dp, field, n) atomic_fetch_add_explicit(&(dp)->st.field, (n), memory_order_relaxed)

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

static dp_item *item_new(int32_t kind, uint32_t port, const uint8_t *data, uint32_t len) {
    dp_item *it = malloc(sizeof *it + len);
    if (it == NULL) return NULL;
    it->next = NULL;
    it->t = 0;
    it->kind = kind;
    it->port = port;
    it->len = len;
    memcpy(it->data, data, len);
    return it;
}

static void fifo_push(dp_fifo *q, dp_item *it) {
    it->next = NULL;
    if (q->tail) q->tail->next = it; else q->head = it;
    q->tail = it;
    q->count++;
}

static dp_item *fifo_pop(dp_fifo *q) {
    dp_item *it = q->head;
    if (it == NULL) return NULL;
    q->head = it->next;
    if (q->head == NULL) q->tail = NULL;
    q->count--;
    return it;
}

static void fifo_free(dp_fifo *q) {
    dp_item *it;
    while ((it = fifo_pop(q)) != NULL) free(it);
}

static void wake(p4sim_dataplane *dp) {
    uint64_t one = 1;
    ssize_t r = write(dp->wake_fd, &one, sizeof one);
    (void)r;                    /* a full counter still wakes the loop */
}

/* --- up to Python -------------------------------------------------------------------- */

/* Queue an item for dp_next; false if the queue is full (the caller counts the drop). */
static int up_push(p4sim_dataplane *dp, dp_item *it) {
    pthread_mutex_lock(&dp->up_lock);
    int is_log = it->kind == DP_UP_LOG;
    if (is_log ? dp->up_logs >= UP_MAX_LOGS
               : dp->up_frames >= UP_MAX_FRAMES || dp->up_bytes + it->len > UP_MAX_BYTES) {
        pthread_mutex_unlock(&dp->up_lock);
        free(it);
        return 0;
    }
    if (is_log) {
        dp->up_logs++;
    } else {
        dp->up_frames++;
        dp->up_bytes += it->len;
    }
    fifo_push(&dp->up, it);
    pthread_cond_signal(&dp->up_cond);
    pthread_mutex_unlock(&dp->up_lock);
    return 1;
}

static void up_frame(p4sim_dataplane *dp, int32_t kind, uint32_t port, const uint8_t *data, uint32_t len) {
    dp_item *it = item_new(kind, port, data, len);
    if (it == NULL || !up_push(dp, it)) {
        COUNT(dp, up_drops, 1);
        return;
    }
    if (kind == DP_UP_CPU) COUNT(dp, packet_ins, 1);
}

__attribute__((format(printf, 3, 4)))
static void dp_log(p4sim_dataplane *dp, int level, const char *fmt, ...) {
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof text) n = sizeof text - 1;
    dp_item *it = item_new(DP_UP_LOG, (uint32_t)level, (const uint8_t *)text, (uint32_t)n);
    if (it != NULL) up_push(dp, it);
}

/* --- pcap, as the Python loop's RawPcapWriter writes it ------------------------------ */

static FILE *pcap_open(p4sim_dataplane *dp, const char *path) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return NULL;
    /* magic, version 2.4, GMT offset 0, accuracy 0, snaplen 65535, LINKTYPE_ETHERNET; host order */
    struct { uint32_t magic; uint16_t major, minor; int32_t zone; uint32_t sigfigs, snaplen, linktype; } h =
        {0xa1b2c3d4, 2, 4, 0, 0, 65535, 1};
    fwrite(&h, sizeof h, 1, f);
    fflush(f);
    return f;
}

/* A record per frame, whole (as RawPcapWriter: caplen is the length, even past snaplen). */
static void pcap_write(FILE *f, const struct timeval *tv, const uint8_t *data, uint32_t len) {
    uint32_t rec[4] = {(uint32_t)tv->tv_sec, (uint32_t)tv->tv_usec, len, len};
    flockfile(f);               /* Python's transmit writes pcap-out too: a record stays whole */
    fwrite_unlocked(rec, sizeof rec, 1, f);
    fwrite_unlocked(data, 1, len, f);
    funlockfile(f);
}

/* --- ports --------------------------------------------------------------------------- */

static dp_port *port_of(p4sim_dataplane *dp, uint32_t number) {
    for (unsigned i = 0; i < dp->nports; i++)
        if (dp->ports[i].number == number) return &dp->ports[i];
    return NULL;
}

static void send_failed(p4sim_dataplane *dp, dp_port *p, int err) {
    COUNT(dp, send_errors, 1);
    int64_t now = now_ns();
    if (err != p->last_errno || now - p->last_err_ns >= NS) {
        p->last_errno = err;
        p->last_err_ns = now;
        dp_log(dp, DP_WARNING, "send on %s failed: %s", p->iface, strerror(err));
    }
}

static void sent(p4sim_dataplane *dp, dp_port *p, const struct timeval *tv, const uint8_t *data, uint32_t len) {
    COUNT(dp, tx, 1);
    if (p->pcap_out) pcap_write(p->pcap_out, tv, data, len);
}

/* Send a port's batched frames; a frame the kernel refuses (too big for the MTU, link down) is
 * counted and logged, and the rest still go. */
static void tx_flush(p4sim_dataplane *dp, dp_port *p) {
    if (p->tx_n == 0) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    unsigned i = 0;
    while (i < p->tx_n) {
        int r = sendmmsg(p->fd, &p->tx[i], p->tx_n - i, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            send_failed(dp, p, errno);
            r = 1;              /* skip the frame that failed */
        } else {
            for (int k = 0; k < r; k++)
                sent(dp, p, &tv, p->tx_iov[i + k].iov_base, (uint32_t)p->tx_iov[i + k].iov_len);
        }
        i += (unsigned)r;
    }
    p->tx_n = 0;
    if (p->pcap_out) fflush(p->pcap_out);
}

static void tx_add(p4sim_dataplane *dp, dp_port *p, uint8_t *data, uint32_t len) {
    if (p->tx_n == BATCH) tx_flush(dp, p);
    struct iovec *iov = &p->tx_iov[p->tx_n];
    iov->iov_base = data;
    iov->iov_len = len;
    struct mmsghdr *m = &p->tx[p->tx_n++];
    memset(m, 0, sizeof *m);
    m->msg_hdr.msg_iov = iov;
    m->msg_hdr.msg_iovlen = 1;
}

static void send_one(p4sim_dataplane *dp, dp_port *p, const uint8_t *data, uint32_t len) {
    ssize_t r;
    do r = send(p->fd, data, len, 0); while (r < 0 && errno == EINTR);
    if (r < 0) {
        send_failed(dp, p, errno);
        return;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    sent(dp, p, &tv, data, len);
    if (p->pcap_out) fflush(p->pcap_out);
}

static void no_port(p4sim_dataplane *dp, uint32_t port, uint32_t len) {
    COUNT(dp, no_port, 1);
    if (dp->debug) dp_log(dp, DP_DEBUG, "no interface for port %u: %u-byte frame dropped", port, len);
}

/* --- the pipeline ------------------------------------------------------------------- */

/* The pipeline the loop uses until it calls pipe_leave; NULL if frames go to Python. */
static dp_pipe *pipe_enter(p4sim_dataplane *dp) {
    atomic_fetch_add(&dp->epoch, 1);
    return atomic_load(&dp->pipe);
}

static void pipe_leave(p4sim_dataplane *dp) { atomic_fetch_add(&dp->epoch, 1); }

/* Route what the pipeline emitted (out's frames from `first`): the CPU port's up to Python,
 * others batched per port (or, `delay`ed, onto the latency queue), unknown ports dropped. */
static void route_outputs(p4sim_dataplane *dp, uint32_t first, int delay) {
    p4sim_outbuf *ob = &dp->out;
    int64_t due = delay ? now_ns() + dp->latency_ns : 0;
    for (uint32_t i = first; i < ob->count; i++) {
        p4sim_frame *f = &ob->frames[i];
        uint8_t *data = ob->data + f->offset;
        if ((int64_t)f->port == dp->cpu_port) {
            up_frame(dp, DP_UP_CPU, f->port, data, f->len);
            continue;
        }
        dp_port *p = port_of(dp, f->port);
        if (p == NULL) {
            no_port(dp, f->port, f->len);
        } else if (delay) {
            dp_item *it = item_new(0, f->port, data, f->len);
            if (it == NULL) continue;
            it->t = due;
            pthread_mutex_lock(&dp->delay_lock);
            fifo_push(&dp->delayed, it);
            pthread_mutex_unlock(&dp->delay_lock);
        } else {
            tx_add(dp, p, data, f->len);
        }
    }
}

static void flush_all(p4sim_dataplane *dp) {
    for (unsigned i = 0; i < dp->nports; i++) tx_flush(dp, &dp->ports[i]);
}

/* --- the slow target ------------------------------------------------------------------ */

static void slow_enqueue(p4sim_dataplane *dp, uint32_t port, const uint8_t *data, uint32_t len, int64_t now) {
    COUNT(dp, received, 1);
    if (dp->waiting.count >= dp->queue_depth) {
        COUNT(dp, queue_drops, 1);
        return;
    }
    dp_item *it = item_new(DP_UP_RX, port, data, len);
    if (it == NULL) {
        COUNT(dp, queue_drops, 1);
        return;
    }
    it->t = now;
    fifo_push(&dp->waiting, it);
    if (dp->waiting.count > atomic_load_explicit(&dp->st.max_queued, memory_order_relaxed))
        atomic_store_explicit(&dp->st.max_queued, dp->waiting.count, memory_order_relaxed);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Serve what is due: each packet leaves service 1/pps after the previous one (or after it
 * arrived, if the pipeline was idle), then goes through the program. Returns when the packet
 * in service is not due yet (dp->busy_until) or the queue is empty. */
static void slow_serve(p4sim_dataplane *dp) {
    int64_t now = now_ns();
    for (;;) {
        if (dp->in_service == NULL) {
            dp->in_service = fifo_pop(&dp->waiting);
            if (dp->in_service == NULL) return;
            dp->busy_until = max64(max64(dp->in_service->t, dp->busy_until),
                                   now - MAX_LAG_SERVICES * dp->service_ns) + dp->service_ns;
        }
        if (dp->busy_until > now) return;
        dp_item *it = dp->in_service;
        dp->in_service = NULL;
        dp_pipe *pipe = pipe_enter(dp);
        if (pipe == NULL) {
            pipe_leave(dp);
            if (!up_push(dp, it)) COUNT(dp, up_drops, 1);
        } else {
            pipe->fn(pipe->ctx, it->port, it->data, it->len, &dp->out);
            pipe_leave(dp);
            free(it);
            route_outputs(dp, 0, dp->latency_ns > 0);
            flush_all(dp);
            p4sim_outbuf_clear(&dp->out);
        }
        COUNT(dp, served, 1);
        now = now_ns();
    }
}

/* Send what the latency queue holds that is due; returns when its head is due (0: empty). */
static int64_t send_delayed(p4sim_dataplane *dp) {
    for (;;) {
        pthread_mutex_lock(&dp->delay_lock);
        dp_item *it = dp->delayed.head;
        if (it == NULL || it->t > now_ns()) {
            pthread_mutex_unlock(&dp->delay_lock);
            return it ? it->t : 0;
        }
        fifo_pop(&dp->delayed);
        pthread_mutex_unlock(&dp->delay_lock);
        dp_port *p = port_of(dp, it->port);
        if (p != NULL) send_one(dp, p, it->data, it->len);
        free(it);
    }
}

/* --- receive ------------------------------------------------------------------------- */

#define RING_SLOTS (RING_BLOCK / RING_FRAME * RING_BLOCKS)

/* Give port p a receive ring; returns 0 or an errno. */
static int ring_setup(p4sim_dataplane *dp, dp_port *p) {
    int version = TPACKET_V2, thresh = 1;
    struct tpacket_req req = {RING_BLOCK, RING_BLOCKS, RING_FRAME, RING_SLOTS};
    if (setsockopt(p->fd, SOL_PACKET, PACKET_VERSION, &version, sizeof version) != 0
        || setsockopt(p->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0
        || setsockopt(p->fd, SOL_PACKET, PACKET_COPY_THRESH, &thresh, sizeof thresh) != 0)
        return errno;
    void *ring = mmap(NULL, (size_t)RING_BLOCK * RING_BLOCKS, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
    if (ring == MAP_FAILED) return errno;
    p->ring = ring;
    /* Frames queued before the ring existed would be taken for a big frame's copy; an error
     * from before (the interface was down when the socket was bound) would fail the first read. */
    int pending;
    socklen_t size = sizeof pending;
    getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &pending, &size);
    while (recv(p->fd, dp->big, MAX_FRAME, MSG_DONTWAIT) >= 0) {}
    return 0;
}

/* Read the whole copy of a frame too big for its ring slot; its length, or -1 if it is lost. */
static ssize_t receive_big(p4sim_dataplane *dp, dp_port *p) {
    for (int attempt = 0; attempt < 3; attempt++) {      /* a socket error (link down) is reported once */
        ssize_t r = recv(p->fd, dp->big, MAX_FRAME, MSG_DONTWAIT | MSG_TRUNC);
        if (r >= 0) return r;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    }
    return -1;
}

/* Take up to BATCH frames from a port's ring through the pipeline (or into the slow target's
 * queue, or up to Python), then send what came out. */
static void receive_batch(p4sim_dataplane *dp, dp_port *p) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    int64_t now = dp->slow ? now_ns() : 0;
    dp_pipe *pipe = dp->slow ? NULL : pipe_enter(dp);
    for (int n = 0; n < BATCH; n++) {
        struct tpacket2_hdr *h = (struct tpacket2_hdr *)(p->ring + (size_t)p->ring_head * RING_FRAME);
        uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
        if (!(status & TP_STATUS_USER)) break;
        const struct sockaddr_ll *sll = (const struct sockaddr_ll *)((uint8_t *)h + TPACKET_ALIGN(sizeof *h));
        const uint8_t *data = (uint8_t *)h + h->tp_mac;
        uint32_t len = h->tp_snaplen;
        int keep = sll->sll_pkttype != PACKET_OUTGOING;      /* not our own, looped back */
        if (status & TP_STATUS_COPY) {                         /* too big for a slot: read it whole */
            ssize_t r = receive_big(dp, p);
            data = dp->big;
            len = r < 0 ? 0 : (uint32_t)r;
            if (r < 0 || r > MAX_FRAME) len = h->tp_len + 1;  /* lost or cut: counted below */
        }
        if (keep && len != h->tp_len) {
            keep = 0;
            COUNT(dp, oversized, 1);
            dp_log(dp, DP_WARNING, "%u-byte frame on %s dropped: more than the %d bytes p4sim receives, "
                   "or more than its socket queue holds", h->tp_len, p->iface, MAX_FRAME);
        }
        if (keep) {
            COUNT(dp, rx, 1);
            if (p->pcap_in) pcap_write(p->pcap_in, &tv, data, len);
            if (dp->slow)
                slow_enqueue(dp, p->number, data, len, now);
            else if (pipe == NULL)
                up_frame(dp, DP_UP_RX, p->number, data, len);
            else
                pipe->fn(pipe->ctx, p->number, data, len, &dp->out);
        }
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        p->ring_head = (p->ring_head + 1) % RING_SLOTS;
    }
    if (!dp->slow) {
        pipe_leave(dp);
        route_outputs(dp, 0, 0);     /* the outbuf no longer grows: its frames can be pointed at */
        flush_all(dp);
        p4sim_outbuf_clear(&dp->out);
    }
    if (p->pcap_in) fflush(p->pcap_in);
}

/* Take (and so clear) a port's socket error, as the interface going down sets: else poll
 * would report it again at once, for ever. */
static void socket_error(p4sim_dataplane *dp, dp_port *p) {
    int err = 0;
    socklen_t size = sizeof err;
    if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &size) == 0 && err != 0) {
        COUNT(dp, receive_errors, 1);
        dp_log(dp, DP_WARNING, "receive on %s failed: %s", p->iface, strerror(err));
    }
}

/* --- the API Python calls ------------------------------------------------------------- */

p4sim_dataplane *dp_new(int64_t cpu_port, int debug, double slow_pps, uint32_t slow_queue, double slow_latency_s) {
    p4sim_dataplane *dp = calloc(1, sizeof *dp);
    if (dp == NULL) return NULL;
    dp->big = malloc(MAX_FRAME);
    dp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (dp->big == NULL || dp->wake_fd < 0) {
        if (dp->wake_fd >= 0) close(dp->wake_fd);
        free(dp->big);
        free(dp);
        return NULL;
    }
    dp->cpu_port = cpu_port;
    dp->debug = debug;
    if (slow_pps > 0) {
        dp->slow = 1;
        dp->service_ns = (int64_t)(NS / slow_pps);
        dp->queue_depth = slow_queue;
        dp->latency_ns = (int64_t)(slow_latency_s * NS);
    }
    pthread_mutex_init(&dp->delay_lock, NULL);
    pthread_mutex_init(&dp->up_lock, NULL);
    pthread_cond_init(&dp->up_cond, NULL);
    return dp;
}

/* Attach an open, bound AF_PACKET socket as switch port `number` (the caller keeps the fd and
 * closes it after dp_free); pcap paths may be NULL. Returns 0, or an errno (*what says of what). */
int dp_add_port(p4sim_dataplane *dp, uint32_t number, int fd, const char *iface, const char *pcap_in,
                const char *pcap_out, const char **what) {
    if (dp->nports == dp->cap_ports) {
        unsigned cap = dp->cap_ports ? 2 * dp->cap_ports : 8;
        dp_port *ports = realloc(dp->ports, cap * sizeof *ports);
        if (ports == NULL) return ENOMEM;
        dp->ports = ports;
        dp->cap_ports = cap;
    }
    dp_port *p = &dp->ports[dp->nports];
    memset(p, 0, sizeof *p);
    p->number = number;
    p->fd = fd;
    snprintf(p->iface, sizeof p->iface, "%s", iface);
    /* The kernel need not queue our own transmissions for us (older kernels: skipped above). */
    int one = 1, bytes = RCVBUF_BYTES;
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
    /* A send never blocks the loop for long (a stop must get through). */
    struct timeval timeout = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    int err = 0;
    *what = "pcap files";
    if ((pcap_in && (p->pcap_in = pcap_open(dp, pcap_in)) == NULL)
        || (pcap_out && (p->pcap_out = pcap_open(dp, pcap_out)) == NULL)) {
        err = errno;
    } else {
        *what = "receive ring";
        err = ring_setup(dp, p);
    }
    if (err) {
        if (p->pcap_in) fclose(p->pcap_in);
        if (p->pcap_out) fclose(p->pcap_out);
        return err;
    }
    dp->nports++;
    return 0;
}

/* Use pipeline (fn, ctx) from now on, or Python's (fn NULL). Returns once the loop can no longer
 * be inside the previous one, so its owner may free it. */
void dp_set_pipeline(p4sim_dataplane *dp, uintptr_t fn, uintptr_t ctx) {
    dp_pipe *pipe = NULL;
    if (fn != 0) {
        pipe = malloc(sizeof *pipe);
        if (pipe == NULL) abort();
        pipe->fn = (p4sim_process_fn)fn;
        pipe->ctx = (void *)ctx;
    }
    dp_pipe *old = atomic_exchange(&dp->pipe, pipe);
    uint_fast64_t e = atomic_load(&dp->epoch);
    if (e & 1) {
        struct timespec pause = {0, 20000};
        while (atomic_load(&dp->epoch) == e) nanosleep(&pause, NULL);
    }
    free(old);
}

/* Send a frame out of a port from another thread (Python's PacketOut path), after the slow
 * target's latency if it has one. */
void dp_transmit(p4sim_dataplane *dp, uint32_t port, const uint8_t *data, uint32_t len) {
    dp_port *p = port_of(dp, port);
    if (p == NULL) {
        no_port(dp, port, len);
        return;
    }
    if (dp->slow && dp->latency_ns > 0) {
        dp_item *it = item_new(0, port, data, len);
        if (it == NULL) return;
        pthread_mutex_lock(&dp->delay_lock);
        it->t = now_ns() + dp->latency_ns;
        int was_empty = dp->delayed.head == NULL;
        fifo_push(&dp->delayed, it);
        pthread_mutex_unlock(&dp->delay_lock);
        if (was_empty) wake(dp);      /* the loop sets no timer for an empty queue */
        return;
    }
    send_one(dp, p, data, len);
}

/* The packet loop; returns after dp_stop. */
void dp_run(p4sim_dataplane *dp) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);     /* the slow target's schedule is to the microsecond */
    struct pollfd *fds = calloc(dp->nports + 1, sizeof *fds);
    if (fds == NULL) {
        dp_log(dp, DP_WARNING, "data plane: out of memory");
        return;
    }
    for (unsigned i = 0; i < dp->nports; i++) {
        fds[i].fd = dp->ports[i].fd;
        fds[i].events = POLLIN;
    }
    fds[dp->nports].fd = dp->wake_fd;
    fds[dp->nports].events = POLLIN;
    while (!atomic_load(&dp->stop)) {
        int64_t deadline = 0;
        if (dp->slow) {
            slow_serve(dp);
            int64_t delayed = send_delayed(dp);
            if (dp->in_service) deadline = dp->busy_until;
            if (delayed && (!deadline || delayed < deadline)) deadline = delayed;
        }
        struct timespec ts, *timeout = NULL;
        if (deadline) {
            int64_t wait = max64(deadline - now_ns(), 0);
            ts.tv_sec = wait / NS;
            ts.tv_nsec = wait % NS;
            timeout = &ts;
        }
        int n = ppoll(fds, dp->nports + 1, timeout, NULL);
        if (n < 0) {
            if (errno == EINTR) continue;
            dp_log(dp, DP_WARNING, "data plane: poll failed: %s", strerror(errno));
            break;
        }
        if (fds[dp->nports].revents) {
            uint64_t count;
            ssize_t r = read(dp->wake_fd, &count, sizeof count);
            (void)r;
        }
        for (unsigned i = 0; i < dp->nports; i++) {
            if (fds[i].revents & POLLERR) socket_error(dp, &dp->ports[i]);
            if (fds[i].revents & POLLIN) receive_batch(dp, &dp->ports[i]);
        }
    }
    free(fds);
}

/* Stop dp_run and wake dp_next; both return soon after. */
void dp_stop(p4sim_dataplane *dp) {
    atomic_store(&dp->stop, 1);
    wake(dp);
    pthread_mutex_lock(&dp->up_lock);
    pthread_cond_broadcast(&dp->up_cond);
    pthread_mutex_unlock(&dp->up_lock);
}

/* The next item for Python, waiting up to timeout_ms: a frame (DP_UP_RX, DP_UP_CPU) or a log line
 * (DP_UP_LOG). NULL on timeout, or once stopped and no log line is left (frames still queued then
 * are dropped). Free it with dp_item_free. */
dp_item *dp_next(p4sim_dataplane *dp, int timeout_ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= NS) {
        until.tv_sec++;
        until.tv_nsec -= NS;
    }
    pthread_mutex_lock(&dp->up_lock);
    dp_item *it = NULL;
    for (;;) {
        int stopped = atomic_load(&dp->stop);
        while ((it = fifo_pop(&dp->up)) != NULL) {
            if (it->kind == DP_UP_LOG) {
                dp->up_logs--;
            } else {
                dp->up_frames--;
                dp->up_bytes -= it->len;
            }
            if (!stopped || it->kind == DP_UP_LOG) break;
            free(it);
        }
        if (it != NULL || stopped) break;
        if (pthread_cond_timedwait(&dp->up_cond, &dp->up_lock, &until) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&dp->up_lock);
    return it;
}

void dp_item_free(dp_item *it) { free(it); }

void dp_get_stats(p4sim_dataplane *dp, dp_stats *s) {
    for (unsigned i = 0; i < dp->nports; i++) {     /* the kernel's counts restart at each read */
        struct tpacket_stats ps;
        socklen_t size = sizeof ps;
        if (getsockopt(dp->ports[i].fd, SOL_PACKET, PACKET_STATISTICS, &ps, &size) == 0)
            COUNT(dp, ring_drops, ps.tp_drops);
    }
#define LOAD(f) s->f = atomic_load_explicit(&dp->st.f, memory_order_relaxed)
    LOAD(received); LOAD(served); LOAD(queue_drops); LOAD(max_queued);
    LOAD(rx); LOAD(tx); LOAD(no_port); LOAD(oversized); LOAD(send_errors); LOAD(receive_errors);
    LOAD(packet_ins); LOAD(up_drops); LOAD(ring_drops);
#undef LOAD
}

/* Free everything but the ports' sockets (their owner closes them); after dp_run returned. */
void dp_free(p4sim_dataplane *dp) {
    for (unsigned i = 0; i < dp->nports; i++) {
        if (dp->ports[i].pcap_in) fclose(dp->ports[i].pcap_in);
        if (dp->ports[i].pcap_out) fclose(dp->ports[i].pcap_out);
        munmap(dp->ports[i].ring, (size_t)RING_BLOCK * RING_BLOCKS);
    }
    free(dp->ports);
    free(atomic_load(&dp->pipe));
    free(dp->in_service);
    fifo_free(&dp->waiting);
    fifo_free(&dp->delayed);
    fifo_free(&dp->up);
    p4sim_outbuf_free(&dp->out);
    pthread_mutex_destroy(&dp->delay_lock);
    pthread_mutex_destroy(&dp->up_lock);
    pthread_cond_destroy(&dp->up_cond);
    close(dp->wake_fd);
    free(dp->big);
    free(dp);
}
