/* The hosts' compiled engine: what Python calls through cffi (hosts/engine/__init__.py reads
 * this file as its cdef, so it holds declarations only: no preprocessor lines, no macros).
 * One INC call or ring call runs here from the first packet to the result, wire-identical to
 * hosts/agent.py and hosts/ring.py (docs/protocol.md); the timers and windows follow
 * hosts/pacing.py and carry over from call to call in the structs below.
 */

/* hosts/pacing.py's RtoEstimator */
typedef struct {
    double initial, min_rto, max_rto, min_variance;
    int has_srtt;
    double srtt, rttvar, rto;
    int64_t samples;
} eng_rto;

/* hosts/pacing.py's CongestionWindow */
typedef struct {
    int64_t limit;
    double decrease, minimum, cwnd, ssthresh;
    int64_t losses;
    int has_recover;
    int64_t recover;
} eng_cwnd;

/* hosts/transport.py's SendCounters: sends the kernel made wait, sends it never took; and
   whether the socket refused UDP segmentation offload (then datagrams go one by one) */
typedef struct {
    int64_t waits, dropped;
    int last_errno;
    int gso_refused;
} eng_counters;

/* hosts/agent.py's CallStats, the parts the engine measures (times in seconds) */
typedef struct {
    int64_t packets_sent, retransmits, fast_retransmits, timeouts, results, duplicate_results, early_results,
            early_drops, redone_chunks;
    int64_t window_acks;             /* OP_WINDOW_ACKs sent (a Reduce's root) or taken (the others) */
    int has_first_result;
    double first_result_s, setup_s, exponent_s, send_s, wait_s, retransmit_s, finish_s, total_s;
    /* after the call (inc_run): the transport's and the timers' share of it, and their state */
    int64_t send_waits, send_drops, rtt_samples;
    int has_srtt;
    double srtt_s, final_rto_s, final_window;
} eng_stats;

/* One INC worker: its job (set once), its timers and window (carried from call to call). */
typedef struct {
    int fd;                          /* the worker's UDP socket (non-blocking), owned by Python */
    uint32_t agg_addr;               /* the aggregator's IPv4 address and UDP port, network order */
    uint16_t agg_port;
    int job_id, worker_id, num_workers, window, k;
    double give_up_after;
    double spin, spin_large;         /* seconds a call of <= POLL_CHUNKS chunks / a larger one reads before sleeping */
    int exponent_slack, exponent_margin;
    int eager_rounds;                /* JobConfig.eager_rounds: may use eager Broadcast rounds */
    int window_acks;                 /* JobConfig.window_acks: may have Reduce calls acknowledged by their roots */
    uint64_t next_seq;
    eng_rto rto;
    eng_cwnd cwnd;
    double live_since;               /* when the first result ever came (CLOCK_MONOTONIC), else inf */
    int eager;                       /* a result said the switch runs eager Broadcast rounds (FLAG_EAGER) */
    int after_eager;                 /* the last call was eager: it ended on a gate */
    int takes_window_acks;           /* a Reduce result said the switch takes window ACKs (FLAG_WINDOW_ACKS) */
    void *bases;                     /* the last float calls' agreed exponents (inc.c bases_t; NULL before one) */
    eng_counters counters;
    void *scratch;                   /* the calls' memory, kept from call to call (grown as needed) */
    size_t scratch_size;
    void *receive;                   /* the datagrams' buffers */
    void *early;                     /* results that came before their item was made (inc.c early_t) */
} inc_engine;

/* One call: what to send (kind, dtype, data, roots) and what came of it. */
typedef struct {
    int kind;                        /* ENG_KIND_* */
    int dtype;                       /* ENG_DTYPE_*: of data and out (GATHER: int32 words) */
    int collective, reduce_op;
    int window_acks_pay;             /* a Reduce long enough for its roots' window ACKs (hosts/agent.py) */
    const void *data;
    int64_t size;                    /* elements */
    const uint8_t *roots;            /* each chunk's root worker, or NULL: all 0 */
    void *out;                       /* size elements of dtype */
    int status;                      /* ENG_* */
    int64_t *bad_chunks;             /* out: the chunks an error names, in order (room for every chunk) */
    int64_t bad_count;
    uint64_t timeout_seq;            /* ENG_TIMEOUT: the item that waited too long */
    int64_t timeout_chunk, timeout_sends;
    double timeout_waited;
    eng_stats stats;
} inc_call;

enum { ENG_KIND_INT32 = 0, ENG_KIND_ORDERED = 1, ENG_KIND_GATHER = 2, ENG_KIND_FLOAT = 3 };
enum { ENG_DTYPE_INT32 = 0, ENG_DTYPE_FLOAT32 = 1, ENG_DTYPE_FLOAT16 = 2, ENG_DTYPE_BFLOAT16 = 3 };
enum { ENG_OK = 0, ENG_INT32_OVERFLOW = 1, ENG_NOT_A_NUMBER = 2, ENG_FLOAT_OVERFLOW = 3, ENG_BEYOND_RANGE = 4,
       ENG_TIMEOUT = 5, ENG_NO_MEMORY = 6, ENG_CLOSED = 7 };

inc_engine *inc_new(void);
void inc_free(inc_engine *e);
int inc_run(inc_engine *e, inc_call *c);

/* One ring rank (hosts/ring.py): a service thread acknowledges and retransmits between calls. */
typedef struct ring_engine ring_engine;

typedef struct {
    int fd;
    int job_id, rank, num_workers, window, k;
    double timeout, ack_delay;
    int64_t max_retries, chunks_per_ack;
    double max_rto;
    double spin, spin_large;         /* as inc_engine's (RingConfig.spin, spin_large) */
    int64_t peer_count;
    const uint32_t *peer_addrs;      /* network order, peer_count of them */
    const uint16_t *peer_ports;
} ring_config;

typedef struct {
    int64_t chunks, retransmissions, acks;
} ring_stats;

typedef struct {
    int op;                          /* RING_OP_* */
    int dtype;                       /* ENG_DTYPE_INT32 or ENG_DTYPE_FLOAT32 (sums), any 4-byte words otherwise */
    int root;
    void *rows;                      /* chunks of k 4-byte words, updated in place */
    int64_t chunk_count;
    const int64_t *bounds;           /* RING_OP_STEPS and _ALLREDUCE: the N + 1 segment bounds, in chunks */
    int first, add;
    int status;                      /* ENG_OK, ENG_TIMEOUT, ENG_NO_MEMORY, ENG_CLOSED */
    int timeout_peer, timeout_waiting_for_acks;
    double timeout_waited;
} ring_call;

/* RING_OP_ALLREDUCE: the steps of an AllReduce's two halves in one call (first 0 adding, then 1 taking) */
enum { RING_OP_STEPS = 0, RING_OP_BROADCAST = 1, RING_OP_REDUCE = 2, RING_OP_ALLREDUCE = 3 };

ring_engine *ring_new(const ring_config *config, char *error, int error_size);
int ring_run(ring_engine *r, ring_call *c);
void ring_close(ring_engine *r, double linger);
void ring_free(ring_engine *r);
void ring_read(ring_engine *r, ring_stats *stats, eng_rto *rto, eng_cwnd *cwnd, eng_counters *counters);

/* The numerics the engine sends with, for the tests that prove them equal to hosts/quantize.py's
 * and numpy's (and ml_dtypes'). */
void eng_widen(int dtype, const void *data, int64_t count, double *out);
void eng_narrow(int dtype, const double *values, int64_t count, void *out);
int eng_headroom_bits(int num_workers);
void eng_chunk_exponents(const double *rows, int64_t m, int64_t k, int16_t *out);
void eng_quantize(const double *rows, int64_t m, int64_t k, const int16_t *exponents, int num_workers,
                  int32_t *q, uint8_t *fits);
void eng_dequantize(const int32_t *sums, int64_t m, int64_t k, const int16_t *exponents, int num_workers,
                    double *out);
void eng_to_ordered(const int32_t *bits, int64_t count, int32_t *out);
