/* What the engine's files share and Python does not call. */
#ifndef HOSTS_ENGINE_INTERNAL_H
#define HOSTS_ENGINE_INTERNAL_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "engine.h"

/* The protocol's numbers (protocol/: INC_VERSION, INC_HEADER_SIZE, ELEMENTS_PER_BLOCK, OP_*, FLAG_*,
   COLL_*) and
   hosts/quantize.py's (EXPONENT_MIN, EXPONENT_MAX, WIRE_BITS) come from Python as -D flags
   (hosts/engine/__init__.py: DEFINES), so C has no copy of them to fall out of step. */
#ifndef INC_VERSION
#error "build the engine through hosts/engine/__init__.py, which passes the protocol's constants"
#endif

#define BATCH 64                     /* datagrams per sendmmsg / recvmmsg */
#define SEND_PATIENCE_S 0.05         /* hosts/transport.py: a refused send waits this long, then is lost */
/* A sleeping rank that awaits at least COALESCE_MIN datagrams naps COALESCE_S before it reads
   (recv_some): N = 4 and 8 ranks on 2 cores, 1-4 MiB AllReduce 15-29% faster with 13-23% less
   CPU (docs/measurements.md, "Tried in the ninth round"). Timing only, never what is sent. */
#define COALESCE_S 300e-6
#define COALESCE_MIN 16

/* The elements a packet with data carries for `count` in a job of K = `k` (protocol.data_elements):
   the count's whole blocks, at most K. */
static inline int64_t data_elements(int64_t count, int64_t k)
{
    int64_t blocks = (count + ELEMENTS_PER_BLOCK - 1) / ELEMENTS_PER_BLOCK * ELEMENTS_PER_BLOCK;
    return blocks < k ? blocks : k;
}

/* Seconds a call of `chunks` chunks reads before it sleeps: `spin` for one of at most POLL_CHUNKS
   (its results are due within about a round trip), else `spin_large` (hosts/engine spin_for). */
static inline double call_spin(int64_t chunks, double spin, double spin_large)
{
    return chunks <= POLL_CHUNKS ? spin : spin_large;
}

double eng_now(void);

void rto_init(eng_rto *r, double initial, double min_rto, double max_rto);
void rto_sample(eng_rto *r, double rtt);
double rto_backoff(eng_rto *r, double used);
void cwnd_init(eng_cwnd *c, int64_t limit, double minimum);
int64_t cwnd_allowed(const eng_cwnd *c);
void cwnd_on_ack(eng_cwnd *c, int64_t seq);
void cwnd_on_loss(eng_cwnd *c, int64_t highest_sent);
void cwnd_on_timeout(eng_cwnd *c, int64_t highest_sent);

/* The 16 header bytes, big-endian (hosts/inc.py pack_header). */
typedef struct {
    int opcode, flags, job_id, worker_id, count, pool_version, slot;
    uint32_t seq;
    int exponent, need, reduce_op, collective, root;
} inc_header;

void header_pack(const inc_header *h, uint8_t *out);
void header_unpack(const uint8_t *in, inc_header *h);
/* Big-endian int32s, one per tensor element: inline, so a packet's 352 are a loop of byte swaps
   rather than 352 calls. */
static inline void put_be32(uint8_t *out, uint32_t v)
{
    out[0] = (uint8_t)(v >> 24);
    out[1] = (uint8_t)(v >> 16);
    out[2] = (uint8_t)(v >> 8);
    out[3] = (uint8_t)v;
}

static inline uint32_t get_be32(const uint8_t *in)
{
    return (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
}

/* Batched datagrams on a non-blocking UDP socket. */
/* Up to GSO_SEGMENTS datagrams of one size to one address go as one UDP_SEGMENT send, which the
   kernel cuts into datagrams before the device: one pass through the socket and the route for
   all of them (GSO_BYTES: a UDP datagram's most). */
#define GSO_SEGMENTS 64
#define GSO_BYTES 65507

typedef struct {
    int fd;
    eng_counters *counters;
    struct iovec iov[BATCH];           /* the datagrams added, in order */
    struct sockaddr_in names[BATCH];
    int count;
    struct mmsghdr msgs[BATCH];        /* the sends they make: one per run of datagrams */
    int firsts[BATCH + 1];             /* send i carries datagrams firsts[i] .. firsts[i + 1] - 1 */
    union {                            /* each send's UDP_SEGMENT size */
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } control[BATCH];
} send_batch;

typedef struct {
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_in names[BATCH];
    uint8_t *buffers;                /* BATCH * size */
    size_t size;                     /* bytes per datagram read: a whole packet of the job's K */
} recv_batch;

void batch_add(send_batch *b, const uint8_t *data, size_t len, const struct sockaddr_in *to);
void batch_flush(send_batch *b);
int recv_init(recv_batch *r, size_t size);
void recv_free(recv_batch *r);
/* Up to BATCH datagrams, waiting at most `timeout` seconds (0: only what is there) for the first;
   wake_fd (or -1) ends the wait early when readable. Returns how many, or -1 if interrupted.
   `drained`: the last read found the socket empty, so wait before reading (one system call
   fewer per datagram when they come one at a time). `spin`: seconds of the wait spent reading
   and yielding the CPU before sleeping in poll (0: sleep at once). `many`: the caller awaits
   COALESCE_MIN datagrams or more; one that sleeps (spin 0) then first lets them gather for
   COALESCE_S, so that a wake-up takes several. */
int recv_some(recv_batch *r, int fd, double timeout, int wake_fd, int drained, double spin, int many);
const uint8_t *recv_data(const recv_batch *r, int i, int *len, const struct sockaddr_in **from);

int quantize_scale(int num_workers, int exponent);
int quantize_row(const double *row, int64_t k, int fit, int exponent, int num_workers, int32_t *q);
int chunk_exponent(const double *row, int64_t k);

#endif
