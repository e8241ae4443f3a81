/* Datagrams in batches: sendmmsg (a run of one size to one address as one UDP_SEGMENT send)
 * and recvmmsg on the worker's non-blocking UDP socket, with hosts/transport.py's rules for a
 * send the kernel refuses (EAGAIN, ENOBUFS: wait until writable, back off, count it; after
 * SEND_PATIENCE_S, or on any other error, the packet counts as lost). Also the INC header,
 * big-endian as hosts/inc.py packs it.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103         /* linux/udp.h, for a libc that predates it */
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

void header_pack(const inc_header *h, uint8_t *out)
{
    out[0] = (uint8_t)(INC_VERSION << 4 | h->opcode);
    out[1] = (uint8_t)h->flags;
    out[2] = (uint8_t)(h->job_id >> 8);
    out[3] = (uint8_t)h->job_id;
    /* bytes 4-7, one big-endian word: worker_id 8 bits, count 12, pool_version 1, slot 11 */
    put_be32(out + 4, (uint32_t)h->worker_id << 24 | (uint32_t)(h->count & 0xFFF) << 12 |
                      (uint32_t)(h->pool_version & 1) << 11 | (h->slot & 0x7FF));
    put_be32(out + 8, h->seq);
    out[12] = (uint8_t)h->exponent;         /* int8, two's complement */
    out[13] = (uint8_t)h->need;
    out[14] = (uint8_t)h->reduce_op;
    out[15] = (uint8_t)(h->collective << 5 | h->root);
}

void header_unpack(const uint8_t *in, inc_header *h)
{
    h->opcode = in[0] & 0xF;
    h->flags = in[1];
    h->job_id = in[2] << 8 | in[3];
    uint32_t wcs = get_be32(in + 4);
    h->worker_id = wcs >> 24;
    h->count = wcs >> 12 & 0xFFF;
    h->pool_version = wcs >> 11 & 1;
    h->slot = wcs & 0x7FF;
    h->seq = get_be32(in + 8);
    h->exponent = (int8_t)in[12];
    h->need = (int8_t)in[13];
    h->reduce_op = in[14];
    h->collective = in[15] >> 5;
    h->root = in[15] & 0x1F;
}

void batch_add(send_batch *b, const uint8_t *data, size_t len, const struct sockaddr_in *to)
{
    if (b->count == BATCH)
        batch_flush(b);
    int i = b->count++;
    b->names[i] = *to;
    b->iov[i] = (struct iovec){.iov_base = (void *)data, .iov_len = len};
}

static void dropped(send_batch *b, int err, int datagrams)
{
    b->counters->dropped += datagrams;
    b->counters->last_errno = err;
}

static void pause_s(double seconds)
{
    if (seconds <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - floor(seconds)) * 1e9)};
    nanosleep(&ts, NULL);
}

static int same_address(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* The sends for datagrams `from` .. count - 1: runs of one address and one size (the last of a
   run may be shorter, as UDP_SEGMENT allows) as one segmented send each, unless the socket
   refused that; returns how many sends. */
static int plan_sends(send_batch *b, int from)
{
    int n = 0;
    for (int i = from; i < b->count; n++) {
        size_t size = b->iov[i].iov_len, bytes = size;
        int j = i + 1;
        if (!b->counters->gso_refused)
            while (j < b->count && j - i < GSO_SEGMENTS && b->iov[j - 1].iov_len == size &&
                   b->iov[j].iov_len <= size && bytes + b->iov[j].iov_len <= GSO_BYTES &&
                   same_address(&b->names[j], &b->names[i]))
                bytes += b->iov[j++].iov_len;
        struct msghdr *h = &b->msgs[n].msg_hdr;
        *h = (struct msghdr){.msg_name = &b->names[i], .msg_namelen = sizeof b->names[i],
                             .msg_iov = &b->iov[i], .msg_iovlen = (size_t)(j - i)};
        if (j - i > 1) {
            h->msg_control = b->control[n].buf;
            h->msg_controllen = sizeof b->control[n].buf;
            struct cmsghdr *cm = CMSG_FIRSTHDR(h);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t segment = (uint16_t)size;
            memcpy(CMSG_DATA(cm), &segment, sizeof segment);
        }
        b->firsts[n] = i;
        i = j;
    }
    b->firsts[n] = b->count;
    return n;
}

void batch_flush(send_batch *b)
{
    int sends = plan_sends(b, 0), off = 0;
    double deadline = -1, backoff = 0.0005;     /* per send, as each Python send waits alone */
    while (off < sends) {
        int sent = sendmmsg(b->fd, b->msgs + off, (unsigned)(sends - off), 0);
        if (sent > 0) {
            off += sent;
            deadline = -1;
            backoff = 0.0005;
            continue;
        }
        int err = errno, datagrams = b->firsts[off + 1] - b->firsts[off];
        if (err == EINTR)
            continue;
        if (datagrams > 1 && (err == EINVAL || err == EIO || err == ENOPROTOOPT || err == EOPNOTSUPP)) {
            /* No segmentation offload here (an old kernel, or a device path without it): the
               rest go one datagram per send, on this socket from now on. */
            b->counters->gso_refused = 1;
            int first = b->firsts[off];
            memmove(b->iov, b->iov + first, (size_t)(b->count - first) * sizeof *b->iov);
            memmove(b->names, b->names + first, (size_t)(b->count - first) * sizeof *b->names);
            b->count -= first;
            sends = plan_sends(b, 0), off = 0;
            continue;
        }
        if (err != EAGAIN && err != EWOULDBLOCK && err != ENOBUFS) {
            dropped(b, err, datagrams);
            off++;
            deadline = -1;
            continue;
        }
        double now = eng_now();
        if (deadline < 0) {
            b->counters->waits++;
            deadline = now + SEND_PATIENCE_S;
        } else if (now >= deadline) {
            dropped(b, err, datagrams);
            off++;
            deadline = -1;
            backoff = 0.0005;
            continue;
        }
        /* Writable says the socket buffer has room; ENOBUFS (the device queue) needs a pause too. */
        struct pollfd p = {.fd = b->fd, .events = POLLOUT};
        poll(&p, 1, (int)ceil((deadline - now) * 1000));
        if (err == ENOBUFS) {
            pause_s(fmin(backoff, deadline - eng_now()));
            backoff *= 2;
        }
    }
    b->count = 0;
}

/* A longer datagram is cut to `size` bytes: only a job's own packets matter, and they fit. */
int recv_init(recv_batch *r, size_t size)
{
    r->size = size;
    r->buffers = malloc(BATCH * size);
    if (r->buffers == NULL)
        return -1;
    for (int i = 0; i < BATCH; i++) {
        r->iov[i] = (struct iovec){.iov_base = r->buffers + (size_t)i * size, .iov_len = size};
        r->msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &r->names[i], .msg_namelen = sizeof r->names[i],
                                                  .msg_iov = &r->iov[i], .msg_iovlen = 1}};
    }
    return 0;
}

void recv_free(recv_batch *r)
{
    free(r->buffers);
    r->buffers = NULL;
}

int recv_some(recv_batch *r, int fd, double timeout, int wake_fd, int drained, double spin, int many)
{
    for (int i = 0; i < BATCH; i++)
        r->msgs[i].msg_hdr.msg_namelen = sizeof r->names[i];
    int got = 0;
    if (!drained || timeout <= 0)
        got = recvmmsg(fd, r->msgs, BATCH, MSG_DONTWAIT, NULL);
    if (got > 0)
        return got;
    if (timeout <= 0)
        return 0;
    /* A result due within microseconds costs less to wait for awake than to be woken for
       (a sleep and a wake-up each way); yielding lets the switch and the other workers run. */
    if (spin > 0) {
        double start = eng_now(), until = start + fmin(spin, timeout);
        for (double now = start; now < until; now = eng_now()) {
            sched_yield();
            got = recvmmsg(fd, r->msgs, BATCH, MSG_DONTWAIT, NULL);
            if (got > 0)
                return got;
        }
        timeout -= eng_now() - start;
        if (timeout <= 0)
            return 0;
    }
    /* Ranks that outnumber the cores sleep for their datagrams, and a sleep and a wake-up cost
       them ~30 us of CPU each (docs/measurements.md): with many due, wait for several at once. */
    if (spin <= 0 && many && timeout > COALESCE_S) {
        struct timespec nap = {.tv_sec = 0, .tv_nsec = (long)(COALESCE_S * 1e9)};
        nanosleep(&nap, NULL);
        got = recvmmsg(fd, r->msgs, BATCH, MSG_DONTWAIT, NULL);
        if (got > 0)
            return got;
        timeout -= COALESCE_S;
    }
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
    struct timespec ts = {.tv_sec = (time_t)timeout, .tv_nsec = (long)((timeout - floor(timeout)) * 1e9)};
    if (isinf(timeout))
        ts = (struct timespec){.tv_sec = 3600};
    int ready = ppoll(p, wake_fd >= 0 ? 2 : 1, &ts, NULL);
    if (ready < 0)
        return errno == EINTR ? -1 : 0;
    if (ready == 0 || !(p[0].revents & (POLLIN | POLLERR)))
        return 0;
    got = recvmmsg(fd, r->msgs, BATCH, MSG_DONTWAIT, NULL);
    return got > 0 ? got : 0;      /* EAGAIN after a spurious wake-up, or an ICMP error queued on the socket */
}

const uint8_t *recv_data(const recv_batch *r, int i, int *len, const struct sockaddr_in **from)
{
    *len = (int)r->msgs[i].msg_len;
    *from = &r->names[i];
    return r->buffers + (size_t)i * r->size;
}
