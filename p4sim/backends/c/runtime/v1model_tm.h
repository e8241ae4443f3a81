/* The v1model pipeline around a program's blocks, and its traffic manager: what
 * backends/python/switch.py's PythonSwitch does, step for step (parser, checksums, ingress,
 * I2E clones, resubmit, the packet replication engine, egress, E2E clones, deparser, truncation,
 * recirculation, at most P4S_MAX_PASSES ingress passes).
 *
 * Included once at the end of a generated program, which defines before it: pl_t (a struct
 * whose first member is `p4s_pipe pipe` and which holds the reused PHV `phv`), hdr_t, meta_t and
 * sm_t, PIPE_DESC, and the functions PIPE_parser, PIPE_verify, PIPE_ingress, PIPE_egress,
 * PIPE_compute, PIPE_deparser, PIPE_inv_hdr (a new packet: every header invalid),
 * PIPE_restore (copy a field list's fields of preserved metadata) and PIPE_init; and
 * PIPE_TIME, 0 when the program never reads standard_metadata's timestamps.
 */
#define P4S_NORMAL 0
#define P4S_INGRESS_CLONE 1
#define P4S_EGRESS_CLONE 2
#define P4S_RECIRC 4
#define P4S_REPLICATION 5
#define P4S_RESUBMIT 6
#define P4S_I2E 0
#define P4S_E2E 1
#define P4S_DROP_PORT 511
#define P4S_MAX_PASSES 8
#define P4S_MAX_E2E_DEPTH 4
#define P4S_MASK48 0xFFFFFFFFFFFFull

/* A program that never reads the timestamps (PIPE_TIME 0) is spared reading the clock. */
static inline uint64_t tm_now_us48(const pl_t *P) {
    return PIPE_TIME ? (p4s_clock_ns(P->pipe.core) / 1000) & P4S_MASK48 : 0;
}

static __attribute__((noinline)) void tm_parse(pl_t *P, p4s_pkt *pkt, hdr_t *hdr, meta_t *meta, sm_t *sm) {
    if (__builtin_setjmp(P->pipe.parse_jmp) == 0)
        PIPE_parser(P, pkt, hdr, meta, sm);
    else
        sm->parser_error = P->pipe.reject_code;
}

static void tm_egress(pl_t *P, hdr_t *hdr, meta_t *meta, sm_t *sm, const uint8_t *payload, uint32_t plen,
                      uint32_t eport, uint32_t rid, uint32_t itype, int jobs, p4sim_outbuf *out, int depth,
                      uint64_t trunc) {
    p4s_pipe *pipe = &P->pipe;
    p4s_pk *pk = &pipe->pk;
    sm->egress_port = eport;
    sm->egress_rid = rid;
    sm->instance_type = itype;
    sm->egress_spec = 0;              /* as BMv2: egress sees 511 here only if it drops */
    sm->egress_global_timestamp = tm_now_us48(P);
    sm->enq_timestamp = (uint32_t)sm->ingress_global_timestamp;
    p4s_pk_reset(pk, sm, sm->packet_length);
    pk->payload = payload;
    pk->payload_len = plen;
    PIPE_egress(P, hdr, meta, sm);
    pipe->exiting = 0;
    if (pipe->pused) p4s_digests_commit(pipe);
    int clone_set = pk->clone_set, recirculate = pk->recirculate_flag;
    uint64_t clone_kind = pk->clone_kind, session = pk->clone_session, truncate = pk->truncate;
    int64_t clone_fl = pk->clone_fl, recirculate_fl = pk->recirculate_fl;
    if (clone_set && clone_kind == P4S_E2E && depth < P4S_MAX_E2E_DEPTH) {
        p4s_replicas *s = (p4s_replicas *)p4s_idmap_get(&pipe->clones, session);
        if (s != NULL) {
            meta_t keep = *meta;
            for (uint32_t i = 0; i < s->n; i++) {
                /* BMv2 copies the headers and resets all metadata, standard_metadata included. */
                hdr_t ch = *hdr;
                meta_t cmeta;
                sm_t csm;
                memset(&cmeta, 0, sizeof cmeta);
                memset(&csm, 0, sizeof csm);
                csm.packet_length = sm->packet_length;
                if (clone_fl >= 0) PIPE_restore(clone_fl, &cmeta, &keep);
                tm_egress(P, &ch, &cmeta, &csm, payload, plen, s->ports[i], s->rids[i], P4S_EGRESS_CLONE, jobs,
                          out, depth + 1, s->packet_length_bytes);
            }
        }
    }
    if (sm->egress_spec == P4S_DROP_PORT) {
        pipe->core->stats.dropped++;
        return;
    }
    pk->sm = sm;
    PIPE_compute(P, hdr, meta);
    pipe->exiting = 0;
    pipe->dused = 0;
    PIPE_deparser(P, hdr);
    uint32_t hlen = pipe->dused;
    uint64_t total = (uint64_t)hlen + plen;
    if (truncate && total > truncate) total = truncate;
    if (trunc && total > trunc) total = trunc;
    uint32_t nh = total < hlen ? (uint32_t)total : hlen, np = (uint32_t)(total - nh);
    if (recirculate) {
        if (jobs) p4s_job_push(pipe, pipe->dbuf, nh, payload, np, sm->ingress_port, P4S_RECIRC, recirculate_fl, meta);
        return;
    }
    uint8_t *dst = p4sim_outbuf_add(out, eport, (uint32_t)total);
    if (dst == NULL && total) p4s_fault(pipe, "out of memory");     /* an empty frame may have no bytes */
    if (nh) memcpy(dst, pipe->dbuf, nh);
    if (np) memcpy(dst + nh, payload, np);
}

/* An ingress clone: the packet as received, parsed again, with the preserved metadata. */
static void tm_i2e_clone(pl_t *P, const uint8_t *data, uint32_t len, uint32_t port, uint64_t session, int64_t fl,
                         const meta_t *meta, p4sim_outbuf *out) {
    p4s_pipe *pipe = &P->pipe;
    p4s_replicas *s = (p4s_replicas *)p4s_idmap_get(&pipe->clones, session);
    if (s == NULL) return;
    meta_t keep = *meta;
    for (uint32_t i = 0; i < s->n; i++) {
        hdr_t hdr;
        meta_t cmeta;
        sm_t sm;
        memset(&hdr, 0, sizeof hdr);
        memset(&cmeta, 0, sizeof cmeta);
        memset(&sm, 0, sizeof sm);
        sm.ingress_port = port;
        sm.packet_length = len;
        sm.instance_type = P4S_INGRESS_CLONE;
        p4s_pk_reset(&pipe->pk, &sm, len);
        p4s_pkt pkt = {data, len, 0};
        tm_parse(P, &pkt, &hdr, &cmeta, &sm);
        if (fl >= 0) PIPE_restore(fl, &cmeta, &keep);
        tm_egress(P, &hdr, &cmeta, &sm, data + pkt.off, len - pkt.off, s->ports[i], s->rids[i], P4S_INGRESS_CLONE,
                  0, out, 0, s->packet_length_bytes);
    }
}

static void tm_ingress(pl_t *P, const uint8_t *data, uint32_t len, uint32_t port, uint32_t itype, int64_t fl,
                       const void *keep, p4sim_outbuf *out) {
    p4s_pipe *pipe = &P->pipe;
    p4s_pk *pk = &pipe->pk;
    /* BMv2 reuses one PHV: a new packet clears validity, not field values. Metadata and
     * standard_metadata start at 0 for every packet. */
    hdr_t *hdr = &P->phv;
    meta_t meta;
    sm_t sm;
    memset(&meta, 0, sizeof meta);
    memset(&sm, 0, sizeof sm);
    PIPE_inv_hdr(hdr);
    sm.ingress_port = port;
    sm.packet_length = len;
    sm.instance_type = itype;
    sm.ingress_global_timestamp = tm_now_us48(P);
    if (fl >= 0) PIPE_restore(fl, &meta, (const meta_t *)keep);
    p4s_pk_reset(pk, &sm, len);
    p4s_pkt pkt = {data, len, 0};
    tm_parse(P, &pkt, hdr, &meta, &sm);
    if (sm.parser_error) pipe->core->stats.malformed++;
    const uint8_t *payload = data + pkt.off;
    uint32_t plen = len - pkt.off;
    pk->payload = payload;
    pk->payload_len = plen;
    PIPE_verify(P, hdr, &meta);
    pipe->exiting = 0;
    PIPE_ingress(P, hdr, &meta, &sm);
    pipe->exiting = 0;
    if (pipe->pused) p4s_digests_commit(pipe);
    int clone_set = pk->clone_set, resubmit = pk->resubmit_flag;
    uint64_t clone_kind = pk->clone_kind, session = pk->clone_session;
    int64_t clone_fl = pk->clone_fl, resubmit_fl = pk->resubmit_fl;
    if (clone_set && clone_kind == P4S_I2E) tm_i2e_clone(P, data, len, port, session, clone_fl, &meta, out);
    if (resubmit) {
        p4s_job_push(pipe, data, len, NULL, 0, port, P4S_RESUBMIT, resubmit_fl, &meta);
        return;
    }
    if (sm.mcast_grp) {
        p4s_replicas *g = (p4s_replicas *)p4s_idmap_get(&pipe->mcast, sm.mcast_grp);
        uint32_t n = g != NULL ? g->n : 0;
        for (uint32_t i = 0; i < n; i++) {
            if (i == n - 1) {
                tm_egress(P, hdr, &meta, &sm, payload, plen, g->ports[i], g->rids[i], P4S_REPLICATION, 1, out, 0, 0);
            } else {
                hdr_t ch = *hdr;
                meta_t cmeta = meta;
                sm_t csm = sm;
                tm_egress(P, &ch, &cmeta, &csm, payload, plen, g->ports[i], g->rids[i], P4S_REPLICATION, 1, out,
                          0, 0);
            }
        }
        if (n == 0) pipe->core->stats.dropped++;
        return;
    }
    if (sm.egress_spec == P4S_DROP_PORT) {
        pipe->core->stats.dropped++;
        return;
    }
    /* As in BMv2, a unicast packet is NORMAL in egress even after resubmit/recirculate, and an
     * ingress truncate() still holds (unless an I2E clone reset it, as in PythonSwitch). */
    tm_egress(P, hdr, &meta, &sm, payload, plen, sm.egress_spec, 0, P4S_NORMAL, 1, out, 0, pk->truncate);
}

static void tm_run(pl_t *P, uint32_t port, const uint8_t *data, uint32_t len, p4sim_outbuf *out) {
    p4s_pipe *pipe = &P->pipe;
    tm_ingress(P, data, len, port, P4S_NORMAL, -1, NULL, out);
    int passes = 1;
    while (pipe->njobs) {
        if (++passes > P4S_MAX_PASSES) {
            pipe->core->stats.dropped += pipe->njobs;
            p4s_jobs_clear(pipe);
            return;
        }
        p4s_job *job = pipe->jobs[0];
        memmove(&pipe->jobs[0], &pipe->jobs[1], (pipe->njobs - 1) * sizeof *pipe->jobs);
        pipe->njobs--;
        pipe->cur_job = job;
        tm_ingress(P, job->data, job->len, job->port, job->itype, job->fl, job->meta, out);
        pipe->cur_job = NULL;
        free(job->data);
        free(job);
    }
}

/* One packet, under the core's lock: a fault (a program error) drops it and counts it. */
static __attribute__((noinline)) void tm_guarded(pl_t *P, uint32_t port, const uint8_t *data, uint32_t len,
                                                 p4sim_outbuf *out) {
    p4s_pipe *pipe = &P->pipe;
    volatile uint32_t count = out->count, used = out->used;
    if (__builtin_setjmp(pipe->fault_jmp) == 0) {
        tm_run(P, port, data, len, out);
        pipe->core->stats.tx += out->count - count;
    } else {
        pipe->core->stats.errors++;
        out->count = count;
        out->used = used;
        p4s_jobs_clear(pipe);
        pipe->exiting = 0;
    }
}

/* The p4sim_process_fn of this program (p4sim_pipeline.h). */
int p4s_process(void *pl, uint32_t port, const uint8_t *data, uint32_t len, p4sim_outbuf *out) {
    pl_t *P = (pl_t *)pl;
    p4s_core *core = P->pipe.core;
    pthread_mutex_lock(&core->mu);
    core->stats.rx++;
    tm_guarded(P, port, data, len, out);
    pthread_mutex_unlock(&core->mu);
    return 0;
}

/* The last fault's reason ("" if none yet). */
const char *p4s_fault_reason(void *pl) {
    const char *why = ((pl_t *)pl)->pipe.fault_msg;
    return why ? why : "";
}

/* A benchmark's loop: `repeat` times the n frames (frame i: lens[i] bytes at data + offs[i], in
 * on ports[i]), the outbuf cleared before each; the frames sent in all. */
uint64_t p4s_bench(void *pl, const uint32_t *ports, const uint8_t *data, const uint32_t *offs, const uint32_t *lens,
                   uint32_t n, uint32_t repeat, p4sim_outbuf *out) {
    uint64_t sent = 0;
    for (uint32_t r = 0; r < repeat; r++) {
        for (uint32_t i = 0; i < n; i++) {
            p4sim_outbuf_clear(out);
            p4s_process(pl, ports[i], data + offs[i], lens[i], out);
            sent += out->count;
        }
    }
    return sent;
}

void *p4s_pipeline_new(p4s_core *core, uint32_t gen) {
    pl_t *P = (pl_t *)calloc(1, sizeof(pl_t));
    if (P == NULL) return NULL;
    if (p4s_pipe_init(&P->pipe, core, gen, &PIPE_DESC) < 0) {
        p4s_pipe_destroy(&P->pipe);
        free(P);
        return NULL;
    }
    PIPE_init(P);
    return P;
}

void p4s_pipeline_free(void *pl) {
    if (pl == NULL) return;
    pl_t *P = (pl_t *)pl;
    p4s_pipe_destroy(&P->pipe);
    free(P);
}
