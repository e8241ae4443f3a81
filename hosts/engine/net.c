/* Datagrams in batches: sendmmsg and recvmmsg on the worker's non-blocking UDP socket, with
 * hosts/transport.py's rules for a send the kernel refuses (EAGAIN, ENOBUFS: wait until
 * writable, back off, count it; after SEND_PATIENCE_S, or on any other error, the packet
 * counts as lost). Also the INC header, big-endian as hosts/inc.py packs it.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    b->msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &b->names[i], .msg_namelen = sizeof b->names[i],
                                              .msg_iov = &b->iov[i], .msg_iovlen = 1}};
}

static void dropped(send_batch *b, int err)
{
    b->counters->dropped++;
    b->counters->last_errno = err;
}

static void pause_s(double seconds)
{
    if (seconds <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - floor(seconds)) * 1e9)};
    nanosleep(&ts, NULL);
}

void batch_flush(send_batch *b)
{
    int off = 0;
    double deadline = -1, backoff = 0.0005;     /* per datagram, as each Python send waits alone */
    while (off < b->count) {
        int sent = sendmmsg(b->fd, b->msgs + off, (unsigned)(b->count - off), 0);
        if (sent > 0) {
            off += sent;
            deadline = -1;
            backoff = 0.0005;
            continue;
        }
        int err = errno;
        if (err == EINTR)
            continue;
        if (err != EAGAIN && err != EWOULDBLOCK && err != ENOBUFS) {
            dropped(b, err);
            off++;
            deadline = -1;
            continue;
        }
        double now = eng_now();
        if (deadline < 0) {
            b->counters->waits++;
            deadline = now + SEND_PATIENCE_S;
        } else if (now >= deadline) {
            dropped(b, err);
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
