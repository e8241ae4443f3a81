/* Batched traffic for measuring and testing a switch over veths, fast enough not to measure
 * itself: a sendmmsg generator with a recvmmsg sink in one thread (a window of frames in
 * flight, so nothing is lost to full queues), a one-frame round-trip timer, and a stub pipeline
 * (p4sim_pipeline.h) that forwards by a port map, for testing the data plane without a program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "p4sim_pipeline.h"

#define BATCH 64
/* The sink's receive ring (PACKET_MMAP), so that reading costs the traffic thread next to
 * nothing and it can outpace the switch: 2048 slots (a burst as big as the switch's ring) of
 * 16 KiB (jumbo frames whole). */
#define RING_FRAME (16 << 10)
#define RING_BLOCK (128 << 10)
#define RING_BLOCKS 256
#define RING_SLOTS (RING_BLOCK / RING_FRAME * RING_BLOCKS)
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A raw socket on an interface, with a receive ring if it receives. */
typedef struct tg_sock {
    int fd;
    uint8_t *ring;
    uint32_t head;
} tg_sock;

/* The socket's next received frame (NULL: none yet); tg_release gives its slot back. */
static struct tpacket2_hdr *tg_peek(tg_sock *s) {
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)(s->ring + (size_t)s->head * RING_FRAME);
    return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER ? h : NULL;
}

static void tg_release(tg_sock *s, struct tpacket2_hdr *h) {
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    s->head = (s->head + 1) % RING_SLOTS;
}

static int wait_readable(tg_sock *s, int timeout_ms) {
    struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
    return poll(&pfd, 1, timeout_ms);
}

void tg_close(tg_sock *s) {
    if (s->ring) munmap(s->ring, (size_t)RING_BLOCK * RING_BLOCKS);
    close(s->fd);
    free(s);
}

/* A raw socket on `iface` inside network namespace `netns` (a path such as /run/netns/NAME, or
 * NULL for this one), receiving (if `receive`) every frame but its own into a ring. Returns it,
 * or NULL with *err set. */
tg_sock *tg_open(const char *netns, const char *iface, int receive, int *err) {
    int home = -1;
    *err = 0;
    if (netns != NULL) {
        home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        int target = open(netns, O_RDONLY | O_CLOEXEC);
        if (home < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0) {
            *err = errno;
            if (target >= 0) close(target);
            if (home >= 0) close(home);
            return NULL;
        }
        close(target);
    }
    tg_sock *s = calloc(1, sizeof *s);
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, receive ? htons(ETH_P_ALL) : 0);
    struct sockaddr_ll addr = {.sll_family = AF_PACKET, .sll_protocol = receive ? htons(ETH_P_ALL) : 0};
    int one = 1, version = TPACKET_V2;
    struct tpacket_req req = {RING_BLOCK, RING_BLOCKS, RING_FRAME, RING_SLOTS};
    if (s == NULL || fd < 0 || (addr.sll_ifindex = (int)if_nametoindex(iface)) == 0
        || (receive && (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0
                        || setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof version) != 0
                        || setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0))
        || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        *err = errno ? errno : ENODEV;
    } else if (receive) {
        void *ring = mmap(NULL, (size_t)RING_BLOCK * RING_BLOCKS, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (ring == MAP_FAILED) *err = errno; else s->ring = ring;
    }
    if (home >= 0) {
        if (setns(home, CLONE_NEWNET) != 0) abort();    /* this thread must not stay elsewhere */
        close(home);
    }
    if (*err) {
        if (fd >= 0) close(fd);
        free(s);
        return NULL;
    }
    s->fd = fd;
    return s;
}

/* The next frame `s` receives within timeout_ms, copied into buf (at most cap bytes); returns
 * its length, or 0 if none came. */
int tg_recv(tg_sock *s, uint8_t *buf, uint32_t cap, int timeout_ms) {
    struct tpacket2_hdr *h = tg_peek(s);
    if (h == NULL && wait_readable(s, timeout_ms) > 0) h = tg_peek(s);
    if (h == NULL) return 0;
    uint32_t len = h->tp_snaplen;
    memcpy(buf, (uint8_t *)h + h->tp_mac, len < cap ? len : cap);
    tg_release(s, h);
    return (int)len;
}

typedef struct tg_result {
    uint64_t sent, received;    /* frames */
    uint64_t mismatched;        /* received but not the expected bytes for its sequence number */
    uint64_t reordered;         /* received with a sequence number other than the next one */
    int64_t first_sent_ns, last_received_ns;
} tg_result;

static void stamp(uint8_t *frame, uint32_t seq_offset, uint64_t seq) {
    for (int i = 7; i >= 0; i--, seq >>= 8) frame[seq_offset + i] = (uint8_t)seq;
}

static uint64_t seq_of(const uint8_t *frame, uint32_t len, uint32_t seq_offset) {
    if (len < seq_offset + 8) return UINT64_MAX;
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++) seq = seq << 8 | frame[seq_offset + i];
    return seq;
}

/* Count a received frame against what the switch should send for its sequence number: `expect`
 * with the number stamped at seq_offset. */
static void check(tg_result *r, uint64_t *next, const struct tpacket2_hdr *h, const uint8_t *expect,
                  uint32_t expect_len, uint32_t seq_offset, uint8_t *scratch) {
    const uint8_t *got = (const uint8_t *)h + h->tp_mac;
    uint64_t seq = seq_of(got, h->tp_snaplen, seq_offset);
    r->received++;
    if (seq != *next) r->reordered++;
    *next = seq + 1;
    memcpy(scratch, expect, expect_len);
    stamp(scratch, seq_offset, seq);
    if (h->tp_len != expect_len || h->tp_snaplen != expect_len || memcmp(got, scratch, expect_len) != 0)
        r->mismatched++;
}

/* Send `count` copies of `frame` (sequence numbers 0.. stamped big-endian at seq_offset) on `tx`
 * in sendmmsg batches, at most `window` frames ahead of what `rx` received, and check each
 * received frame against `expect`. Ends when all came back, or when nothing arrived for quiet_ms.
 * Returns 0 or -errno. */
int tg_blast(tg_sock *tx, tg_sock *rx, const uint8_t *frame, uint32_t len, const uint8_t *expect,
             uint32_t expect_len, uint32_t seq_offset, uint64_t count, uint32_t window, int quiet_ms,
             tg_result *r) {
    memset(r, 0, sizeof *r);
    if (len < seq_offset + 8 || expect_len < seq_offset + 8) return -EINVAL;
    uint8_t *tx_buf = malloc((size_t)BATCH * len), *scratch = malloc(expect_len);
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    if (tx_buf == NULL || scratch == NULL) {
        free(tx_buf);
        free(scratch);
        return -ENOMEM;
    }
    for (int i = 0; i < BATCH; i++) {
        memcpy(tx_buf + (size_t)i * len, frame, len);
        iov[i].iov_base = tx_buf + (size_t)i * len;
        iov[i].iov_len = len;
    }
    uint64_t next = 0;
    int rc = 0;
    r->first_sent_ns = now_ns();
    while (r->received < count) {
        uint64_t in_flight = r->sent - r->received;
        if (r->sent < count && in_flight < window) {
            uint64_t n = count - r->sent;
            if (n > window - in_flight) n = window - in_flight;
            if (n > BATCH) n = BATCH;
            for (uint64_t i = 0; i < n; i++) {
                stamp(iov[i].iov_base, seq_offset, r->sent + i);
                memset(&msgs[i], 0, sizeof msgs[i]);
                msgs[i].msg_hdr.msg_iov = &iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            int sent = sendmmsg(tx->fd, msgs, (unsigned)n, 0);
            if (sent < 0 && errno != EINTR && errno != ENOBUFS && errno != EAGAIN) {
                rc = -errno;
                break;
            }
            if (sent > 0) r->sent += (uint64_t)sent;
        }
        int got = 0;
        struct tpacket2_hdr *h;
        while ((h = tg_peek(rx)) != NULL) {
            check(r, &next, h, expect, expect_len, seq_offset, scratch);
            tg_release(rx, h);
            got++;
        }
        if (got) {
            r->last_received_ns = now_ns();
        } else if ((r->sent == count || r->sent - r->received >= window) && wait_readable(rx, quiet_ms) == 0) {
            break;          /* the rest were lost */
        }
    }
    free(tx_buf);
    free(scratch);
    return rc;
}

/* Replay `n` prepared frames (frame i: lens[i] bytes at offsets[i] in `data`, sent on tx[via[i]])
 * in chunks of at most `chunk`, each chunk's frames grouped by socket (in order per socket), at
 * most `window` frames ahead of the frames received on any of the `nrx` sockets `rx`. Ends when
 * `expected` frames came back, or when nothing arrived for quiet_ms. Returns 0 or -errno. */
int tg_replay(tg_sock **tx, uint32_t ntx, tg_sock **rx, uint32_t nrx, const uint8_t *data, const uint64_t *offsets,
              const uint32_t *lens, const uint8_t *via, uint64_t n, uint64_t expected, uint32_t chunk,
              uint32_t window, int quiet_ms, tg_result *r) {
    memset(r, 0, sizeof *r);
    if (chunk == 0 || chunk > BATCH || chunk > window || nrx == 0) return -EINVAL;
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    struct pollfd *fds = calloc(nrx, sizeof *fds);
    if (fds == NULL) return -ENOMEM;
    for (uint32_t k = 0; k < nrx; k++) {
        fds[k].fd = rx[k]->fd;
        fds[k].events = POLLIN;
    }
    int rc = 0;
    r->first_sent_ns = now_ns();
    while (r->received < expected) {
        if (r->sent < n && r->sent - r->received + chunk <= window) {
            uint64_t end = r->sent + chunk < n ? r->sent + chunk : n;
            for (uint32_t s = 0; s < ntx && rc == 0; s++) {
                unsigned m = 0;
                for (uint64_t i = r->sent; i < end; i++) {
                    if (via[i] != s) continue;
                    iov[m].iov_base = (void *)(data + offsets[i]);
                    iov[m].iov_len = lens[i];
                    memset(&msgs[m], 0, sizeof msgs[m]);
                    msgs[m].msg_hdr.msg_iov = &iov[m];
                    msgs[m].msg_hdr.msg_iovlen = 1;
                    m++;
                }
                for (unsigned done = 0; done < m;) {
                    int sent = sendmmsg(tx[s]->fd, msgs + done, m - done, 0);
                    if (sent < 0 && errno != EINTR) {
                        rc = -errno;
                        break;
                    }
                    if (sent > 0) done += (unsigned)sent;
                }
            }
            if (rc) break;
            r->sent = end;
        }
        int got = 0;
        for (uint32_t k = 0; k < nrx; k++) {
            struct tpacket2_hdr *h;
            while ((h = tg_peek(rx[k])) != NULL) {
                tg_release(rx[k], h);
                got++;
            }
        }
        r->received += (uint64_t)got;
        if (got) {
            r->last_received_ns = now_ns();
        } else if ((r->sent == n || r->sent - r->received + chunk > window) && poll(fds, nrx, quiet_ms) == 0) {
            break;          /* the rest were lost */
        }
    }
    free(fds);
    return rc;
}

/* Round trips of one frame at a time: send `frame` (sequence number i stamped at seq_offset) on
 * `tx` and wait for the frame with that number on `rx`, `count` times; samples_ns[i] is the i-th
 * round trip. Returns how many completed (fewer: one timed out after timeout_ms), or -errno. */
int tg_rtt(tg_sock *tx, tg_sock *rx, const uint8_t *frame, uint32_t len, uint32_t seq_offset, uint32_t count,
           int timeout_ms, int64_t *samples_ns) {
    if (len < seq_offset + 8) return -EINVAL;
    uint8_t *buf = malloc(len);
    if (buf == NULL) return -ENOMEM;
    memcpy(buf, frame, len);
    struct tpacket2_hdr *h;
    int done = 0;
    while ((uint32_t)done < count) {
        while ((h = tg_peek(rx)) != NULL) tg_release(rx, h);     /* nothing stale counts as this frame */
        stamp(buf, seq_offset, (uint64_t)done);
        int64_t start = now_ns();
        if (send(tx->fd, buf, len, 0) < 0) {
            done = done ? done : -errno;
            break;
        }
        int back = 0;
        while (!back) {
            int left = timeout_ms - (int)((now_ns() - start) / 1000000);
            if (left <= 0 || wait_readable(rx, left) <= 0) break;
            while ((h = tg_peek(rx)) != NULL) {
                back |= seq_of((uint8_t *)h + h->tp_mac, h->tp_snaplen, seq_offset) == (uint64_t)done;
                tg_release(rx, h);
            }
        }
        if (!back) break;
        samples_ns[done++] = now_ns() - start;
    }
    free(buf);
    return done;
}

/* --- the stub pipeline ----------------------------------------------------------------- */

#define STUB_PORTS 16

/* Forwards a frame received on port p to out_port[p] (STUB_DROP: nowhere); a frame whose
 * EtherType is cpu_ethertype goes to cpu_port instead. Counts what it processed. */
typedef struct stub_pipeline {
    uint32_t out_port[STUB_PORTS];
    uint32_t cpu_port;
    uint16_t cpu_ethertype;
    atomic_uint_fast64_t processed;
} stub_pipeline;

#define STUB_DROP 0xffffffffu

int stub_process(void *pipeline, uint32_t port, const uint8_t *data, uint32_t len, p4sim_outbuf *out) {
    stub_pipeline *s = pipeline;
    atomic_fetch_add_explicit(&s->processed, 1, memory_order_relaxed);
    uint32_t to = port < STUB_PORTS ? s->out_port[port] : STUB_DROP;
    if (len >= 14 && ((uint32_t)data[12] << 8 | data[13]) == s->cpu_ethertype) to = s->cpu_port;
    if (to == STUB_DROP) return 0;
    uint8_t *dst = p4sim_outbuf_add(out, to, len);
    if (dst != NULL) memcpy(dst, data, len);
    return 0;
}
