/* -*- P4_16 -*- */
// In-network collectives for v1model, after SwitchML: workers send K-element chunks of a
// tensor to the switch's aggregator address; the switch sums them (or keeps their min or
// max) per slot in registers and multicasts the result. The header's collective says who
// gets the result's data: everyone (AllReduce, Broadcast), or the root alone while the others
// get a header-only acknowledgement (Reduce, ReduceScatter: or the root's window ACK, one for
// many chunks) or everyone an acknowledgement (Barrier). Most Broadcast chunks are eager
// rounds, which the root's data completes alone. On a leaf-spine a job can be aggregated on
// two levels: each leaf sums its own workers and sends the spine one partial per slot, the
// spine sums the leaves' partials and sends its result down through the leaves. Everything
// else is forwarded as ordinary traffic.
// Wire format and algorithm: docs/protocol.md.
#include <core.p4>
#include <v1model.p4>

/*************************************************************************
 ***************************  C O N S T A N T S  *************************
 *************************************************************************/

// The protocol's numbers are also those of the hosts and the controller (protocol/, in
// Python); tests/protocol checks that both say the same.

const bit<16> TYPE_IPV4 = 0x0800;
const bit<16> TYPE_ARP  = 0x0806;
const bit<8>  PROTO_UDP = 17;
const bit<16> ARP_REQUEST = 1;
const bit<16> ARP_REPLY   = 2;

// The aggregator: workers send UDP to this address and port; the switch answers ARP for it.
const bit<32> AGG_IP   = 0x0A0000FE;      // 10.0.0.254
const bit<48> AGG_MAC  = 0x0200000000FE;  // 02:00:00:00:00:fe
const bit<16> INC_PORT = 48879;           // 0xBEEF

const bit<4> INC_VERSION = 3;    // 3: data in ceil(count / 32) blocks (2: always K elements)
const bit<4> OP_CONTRIB  = 1;   // worker -> switch: one worker's chunk
const bit<4> OP_RESULT   = 2;   // switch -> worker: the sum of all workers' chunks
const bit<4> OP_JOIN     = 5;   // worker -> switch, header only: counts as a chunk of zeros
const bit<4> OP_ACK      = 6;   // switch -> worker, header only: the round is complete
// root -> switch -> the others (Reduce): which of the root's count items up to seq have their
// results, with each one's flags and need (element i: item seq - count + i; docs/protocol.md)
const bit<4> OP_WINDOW_ACK = 7;

// Who contributes data and who gets it back (the header's collective; root: the header's root).
const bit<3> COLL_ALLREDUCE = 0;   // all contribute, all get the result
const bit<3> COLL_REDUCE    = 1;   // all contribute, the root gets the result, the others an ACK
const bit<3> COLL_BROADCAST = 2;   // the root contributes, the others JOIN; all get the root's chunk
const bit<3> COLL_BARRIER   = 3;   // all JOIN, all get an ACK

// How a slot combines contributions, element by element (the header's reduce_op).
const bit<8> REDUCE_SUM = 0;    // signed 32-bit add, overflow flagged
const bit<8> REDUCE_MIN = 1;    // signed 32-bit minimum
const bit<8> REDUCE_MAX = 2;    // signed 32-bit maximum

const bit<8> FLAG_OVERFLOW = 0x01;  // some element's int32 sum wrapped, or a worker said its values did not fit
const bit<8> FLAG_RESENT   = 0x02;  // a stored result sent again to one worker
const bit<8> FLAG_PARTIAL  = 0x04;  // between switches: a leaf's partial (up), or a result for leaves (down)
const bit<8> FLAG_RETRANSMIT = 0x08;  // a contribution sent again; a result of a round that had one
// A Broadcast chunk whose round the root's data completes alone: the others send no JOIN, only
// ask again (a JOIN with it) for a result they lost. On a flat job's Broadcast or Barrier result:
// this switch runs such rounds, so the workers may use them from their next call on.
const bit<8> FLAG_EAGER = 0x10;
// A Reduce chunk whose root acknowledges it to the others: the switch sends its result to the
// root alone, and the root's OP_WINDOW_ACK, one for many chunks, goes to the others in place of
// an ACK per chunk each. On a flat job's Reduce result: this switch takes window ACKs.
const bit<8> FLAG_WINDOW_ACKS = 0x20;
// What a slot keeps of its contributions' flags, and its result carries.
const bit<8> ROUND_FLAGS = FLAG_OVERFLOW | FLAG_PARTIAL | FLAG_RETRANSMIT | FLAG_EAGER | FLAG_WINDOW_ACKS;

// Added to set_job's num_workers on a leaf of a hierarchical job: a completed slot holds only
// this leaf's partial, which goes up to the spine; the spine's result comes back down.
const bit<8> JOB_LEAF = 0x80;
// A leaf replicates each way through its own group: set_job's mcast_grp holds the leaf's workers
// (results down), mcast_grp | UP_GROUP the spine alone (partials up). No copy is made to be dropped.
const bit<16> UP_GROUP = 0x8000;

// Elements per packet, K: a build parameter (p4c -DINC_K=256; `make run INC_K=256`), a multiple
// of 32 up to what one frame holds: 352 at an MTU of 1500 bytes, 2208 at 9000 (a frame carries
// the IPv4, UDP and INC headers, then at most 4 * K bytes). The controller reads K back from the
// size of slot_values and gives it to the job's workers. A packet carries only the blocks of 32
// elements its count needs, so a small tensor travels in a small packet whatever K is.
#ifndef INC_K
#define INC_K 32                 // 32 x 32 bit = 128 B of tensor
#endif
#if INC_K % 32 != 0 || INC_K < 32 || INC_K > 4064
#error "INC_K, the elements per packet, must be a multiple of 32 from 32 to 4064 (the header's count has 12 bits)"
#endif
#define INC_BLOCKS (INC_K / 32)  // the elements travel in blocks of 32
#define BLOCKS(count) (((bit<16>)(count) + 31) >> 5)   // the blocks a packet of `count` elements carries
const bit<16> BLOCK_BYTES = 4 * 32;
const bit<32> POOL_SIZE   = 512;               // slots per version, shared by all jobs
const bit<32> SLOT_COUNT  = 2 * POOL_SIZE;     // register entries: version * POOL_SIZE + slot
const bit<32> VALUE_COUNT = SLOT_COUNT * INC_K;
// A JOIN's or an ACK's IPv4 and UDP lengths: the headers and the 16-byte INC header alone; a
// packet with data adds 128 bytes per block (BLOCK_BYTES).
const bit<16> INC_HEADER_UDP_LEN  = 8 + 16;
const bit<16> INC_HEADER_IPV4_LEN = 20 + INC_HEADER_UDP_LEN;
const bit<3>  IPV4_MORE_FRAGMENTS = 1;

/*************************************************************************
 ****************************  H E A D E R S  ****************************
 *************************************************************************/

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header arp_t {
    bit<16> htype;
    bit<16> ptype;
    bit<8>  hlen;
    bit<8>  plen;
    bit<16> oper;
    bit<48> sha;
    bit<32> spa;
    bit<48> tha;
    bit<32> tpa;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    bit<32> srcAddr;
    bit<32> dstAddr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> len;
    bit<16> checksum;
}

// 16 bytes. Field meanings and the host's side: docs/protocol.md.
header inc_t {
    bit<4>  version;       // INC_VERSION
    bit<4>  opcode;        // OP_CONTRIB, OP_JOIN, OP_RESULT or OP_ACK
    bit<8>  flags;         // FLAG_*; a result carries the OR of its contributions' flags
    bit<16> job_id;
    bit<8>  worker_id;     // 0..31: a bit in the slot's contributor bitmap
    bit<12> count;         // meaningful elements, 1..K, in ceil(count / 32) blocks; the last block ends in zeros
    bit<1>  pool_version;  // which of the slot's two copies (flips on each reuse)
    bit<11> slot;          // slot index within the job's range
    bit<32> seq;           // chunk sequence number within the job, increasing
    bit<8>  exponent;      // int8: the chunk's shared block exponent (float32 jobs); carried unchanged
    bit<8>  need;          // int8: exponent the sender needs; a result carries the max
    bit<8>  reduce_op;     // REDUCE_SUM, REDUCE_MIN or REDUCE_MAX; every worker of a call sends the same
    bit<3>  collective;    // COLL_*; every worker of a call sends the same
    bit<5>  root;          // the worker that contributes (Broadcast) or gets (Reduce) the data
}

// The elements follow the INC header in blocks of 32: a header stack of K / 32 blocks, so that
// K is a build parameter while a block stays one header of whole fields.
header inc_block_t {
    bit<32> e0;  bit<32> e1;  bit<32> e2;  bit<32> e3;
    bit<32> e4;  bit<32> e5;  bit<32> e6;  bit<32> e7;
    bit<32> e8;  bit<32> e9;  bit<32> e10; bit<32> e11;
    bit<32> e12; bit<32> e13; bit<32> e14; bit<32> e15;
    bit<32> e16; bit<32> e17; bit<32> e18; bit<32> e19;
    bit<32> e20; bit<32> e21; bit<32> e22; bit<32> e23;
    bit<32> e24; bit<32> e25; bit<32> e26; bit<32> e27;
    bit<32> e28; bit<32> e29; bit<32> e30; bit<32> e31;
}

// P4 has no loops: a per-element step is written once, as a macro X(b, f) of the element's
// block b and field f (element 32 * b + f), and IN_BLOCK(X, b) writes it out for the 32 elements
// of block b; a per-block step Y(b), FOR_EACH_BLOCK(Y) for b = 0 .. INC_BLOCKS - 1.
#define IN_BLOCK(X, b) \
    X(b, 0)  X(b, 1)  X(b, 2)  X(b, 3)  X(b, 4)  X(b, 5)  X(b, 6)  X(b, 7)  \
    X(b, 8)  X(b, 9)  X(b, 10) X(b, 11) X(b, 12) X(b, 13) X(b, 14) X(b, 15) \
    X(b, 16) X(b, 17) X(b, 18) X(b, 19) X(b, 20) X(b, 21) X(b, 22) X(b, 23) \
    X(b, 24) X(b, 25) X(b, 26) X(b, 27) X(b, 28) X(b, 29) X(b, 30) X(b, 31)
// REPEAT_n(Y, b) writes Y(b) .. Y(b + n - 1), and FOR_EACH_BLOCK takes one REPEAT_n for each
// binary digit n of INC_BLOCKS, starting after the blocks of the digits above it,
// INC_BLOCKS / 2n * 2n (p4c refuses `~` on a constant without a width: no INC_BLOCKS & ~(2n - 1)).
#define REPEAT_1(Y, b)   Y(b)
#define REPEAT_2(Y, b)   REPEAT_1(Y, b)   REPEAT_1(Y, b + 1)
#define REPEAT_4(Y, b)   REPEAT_2(Y, b)   REPEAT_2(Y, b + 2)
#define REPEAT_8(Y, b)   REPEAT_4(Y, b)   REPEAT_4(Y, b + 4)
#define REPEAT_16(Y, b)  REPEAT_8(Y, b)   REPEAT_8(Y, b + 8)
#define REPEAT_32(Y, b)  REPEAT_16(Y, b)  REPEAT_16(Y, b + 16)
#define REPEAT_64(Y, b)  REPEAT_32(Y, b)  REPEAT_32(Y, b + 32)
#if INC_BLOCKS & 64
#define DIGIT_64(Y) REPEAT_64(Y, (INC_BLOCKS / 128 * 128))
#else
#define DIGIT_64(Y)
#endif
#if INC_BLOCKS & 32
#define DIGIT_32(Y) REPEAT_32(Y, (INC_BLOCKS / 64 * 64))
#else
#define DIGIT_32(Y)
#endif
#if INC_BLOCKS & 16
#define DIGIT_16(Y) REPEAT_16(Y, (INC_BLOCKS / 32 * 32))
#else
#define DIGIT_16(Y)
#endif
#if INC_BLOCKS & 8
#define DIGIT_8(Y) REPEAT_8(Y, (INC_BLOCKS / 16 * 16))
#else
#define DIGIT_8(Y)
#endif
#if INC_BLOCKS & 4
#define DIGIT_4(Y) REPEAT_4(Y, (INC_BLOCKS / 8 * 8))
#else
#define DIGIT_4(Y)
#endif
#if INC_BLOCKS & 2
#define DIGIT_2(Y) REPEAT_2(Y, (INC_BLOCKS / 4 * 4))
#else
#define DIGIT_2(Y)
#endif
#if INC_BLOCKS & 1
#define DIGIT_1(Y) REPEAT_1(Y, (INC_BLOCKS / 2 * 2))
#else
#define DIGIT_1(Y)
#endif
#define FOR_EACH_BLOCK(Y) \
    DIGIT_64(Y) DIGIT_32(Y) DIGIT_16(Y) DIGIT_8(Y) DIGIT_4(Y) DIGIT_2(Y) DIGIT_1(Y)

struct headers_t {
    ethernet_t ethernet;
    arp_t      arp;
    ipv4_t     ipv4;
    udp_t      udp;
    inc_t      inc;
    inc_block_t[INC_BLOCKS] blocks;
}

struct metadata_t {
    // from the job table
    bit<8>  num_workers;
    bool    leaf_job;        // a leaf of a hierarchical job (JOB_LEAF)
    bit<16> mcast_grp;
    bit<16> slot_base;
    bit<16> num_slots;
    // the slot's state, read from registers
    bit<32> slot;            // register index: version * POOL_SIZE + slot_base + slot
    bit<32> value_base;      // slot * K, index of element 0 in slot_values
    bit<32> worker_bit;
    bit<32> seen;
    bit<8>  count;
    bit<32> stored_seq;
    bit<8>  flags;
    bit<8>  need;
    bit<8>  needed;          // contributions that complete the round: num_workers, or 1 (FLAG_EAGER)
    bit<32> overflow;        // bit 31: some element's int32 sum wrapped (add_contribution's flag)
    // for the parser
    bit<8>  blocks_left;     // blocks of elements still to extract
    // for egress
    bit<9>  ingress_port;
    bool    flooded;         // prune the ingress port from the flood group
    bool    ipv4_changed;    // recompute the IPv4 header checksum
    bool    inc_forwarded;   // an INC packet for a job aggregated further up: forward it as is
    bool    inc_reply;       // an INC result: egress addresses it to one worker
    bool    inc_multicast;   // ... the worker named by the replica's rid
    bool    inc_up;          // ... a leaf's partial, to the spine (UP_GROUP): a CONTRIB with PARTIAL
    bit<8>  dest_worker;     // ... else this worker
}

/*************************************************************************
 ****************************  P A R S E R  ******************************
 *************************************************************************/

// A truncated packet ends the parse with PacketTooShort, and one whose count wants more blocks
// than K with StackOutOfBounds; ingress drops INC packets with a parser error.
parser MyParser(packet_in packet,
                out headers_t hdr,
                inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            TYPE_ARP:  parse_arp;
            default:   accept;
        }
    }
    state parse_arp {
        packet.extract(hdr.arp);
        transition accept;
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, PROTO_UDP): parse_udp;
            default:        accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            INC_PORT: parse_inc;
            default:  accept;
        }
    }
    state parse_inc {
        packet.extract(hdr.inc);
        transition select(hdr.inc.opcode, hdr.inc.count) {
            (OP_JOIN, _): accept;     // header only, as is an ACK on its way to a worker
            (OP_ACK, _):  accept;
            (_, 0):       accept;     // no elements: ingress drops it
            default:      parse_elements;
        }
    }
    // The count's elements, rounded up to whole blocks of 32: the last block's tail is zeros.
    state parse_elements {
        meta.blocks_left = (bit<8>)BLOCKS(hdr.inc.count);
        transition parse_block;
    }
    state parse_block {
        packet.extract(hdr.blocks.next);
        meta.blocks_left = meta.blocks_left - 1;
        transition select(meta.blocks_left) {
            0:       accept;
            default: parse_block;
        }
    }
}

/*************************************************************************
 ************   C H E C K S U M    V E R I F I C A T I O N   *************
 *************************************************************************/

control MyVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

/*************************************************************************
 **************  I N G R E S S   P R O C E S S I N G   *******************
 *************************************************************************/

control MyIngress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {

    // One counter per reason a packet is dropped or answered.
    counter(1, CounterType.packets) malformed_drops;       // truncated, bad checksum/ihl/lengths/opcode, count 0 or > K, reduce_op > REDUCE_MAX
    counter(1, CounterType.packets) bad_version_drops;     // INC version we do not speak
    counter(1, CounterType.packets) unknown_job_drops;     // job id not in inc_job
    counter(1, CounterType.packets) spoofed_worker_drops;  // (job, worker) not admitted on this ingress port
    counter(1, CounterType.packets) slot_range_drops;      // slot outside the job's range
    counter(1, CounterType.packets) stale_drops;           // seq of another round than the slot's current one
    counter(1, CounterType.packets) duplicate_drops;       // worker already counted, round not complete
    counter(1, CounterType.packets) contributions;         // contributions added into a slot
    counter(1, CounterType.packets) results_multicast;     // completed slots multicast to their job (a leaf: partials up, results down)
    counter(1, CounterType.packets) results_resent;        // stored results sent again to one worker (a leaf: its partial up)
    counter(1, CounterType.packets) arp_replies;           // ARP requests for AGG_IP answered
    counter(1, CounterType.packets) l2_miss_drops;         // no l2_forward entry for the destination MAC
    counter(1, CounterType.packets) forwarded_to_aggregator;  // INC packets passed on to the job's aggregating switch

    // The state of each slot's current round; index = version * POOL_SIZE + slot.
    register<bit<32>>(SLOT_COUNT)  slot_seen;    // bitmap of workers counted this round
    register<bit<8>>(SLOT_COUNT)   slot_count;   // how many; == num_workers: complete
    register<bit<32>>(SLOT_COUNT)  slot_seq;     // the round's chunk seq
    register<bit<8>>(SLOT_COUNT)   slot_flags;   // OR of flags, plus FLAG_OVERFLOW from the adds
    register<bit<8>>(SLOT_COUNT)   slot_need;    // max of the contributions' need
    register<bit<32>>(VALUE_COUNT) slot_values;  // the partial sums, index slot * K + element

    action drop_malformed() {
        malformed_drops.count(0);
        mark_to_drop(standard_metadata);
    }
    action drop_bad_version() {
        bad_version_drops.count(0);
        mark_to_drop(standard_metadata);
    }

    /*** Ordinary traffic ***/

    action l2_forward_to(bit<9> port) {
        standard_metadata.egress_spec = port;
    }
    action l2_flood(bit<16> mcast_grp) {
        standard_metadata.mcast_grp = mcast_grp;
        meta.flooded = true;
    }
    action drop_l2_miss() {
        l2_miss_drops.count(0);
        mark_to_drop(standard_metadata);
    }
    table l2_forward {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { l2_forward_to; l2_flood; drop_l2_miss; }
        default_action = drop_l2_miss();
        size = 1024;
    }

    // Routed traffic (leaf-spine): as in the P4 tutorials' basic router.
    action ipv4_forward(bit<48> dstAddr, bit<9> port) {
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        standard_metadata.egress_spec = port;
        meta.ipv4_changed = true;
    }
    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { ipv4_forward; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    // Hosts resolve the aggregator's IP with ARP like any neighbour's.
    action answer_arp_for_aggregator() {
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = AGG_MAC;
        hdr.arp.oper = ARP_REPLY;
        hdr.arp.tha = hdr.arp.sha;
        hdr.arp.tpa = hdr.arp.spa;
        hdr.arp.sha = AGG_MAC;
        hdr.arp.spa = AGG_IP;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
        arp_replies.count(0);
    }

    /*** Admission: the job and the worker, both installed by the controller ***/

    action set_job(bit<8> num_workers, bit<16> mcast_grp, bit<16> slot_base, bit<16> num_slots) {
        meta.num_workers = num_workers & ~JOB_LEAF;
        meta.leaf_job = (num_workers & JOB_LEAF) != 0;
        meta.mcast_grp = mcast_grp;
        meta.slot_base = slot_base;
        meta.num_slots = num_slots;
    }
    // Another switch aggregates this job (e.g. a spine, for a leaf): pass it on unchanged.
    action forward_to_aggregator(bit<9> port) {
        standard_metadata.egress_spec = port;
        meta.inc_forwarded = true;
        forwarded_to_aggregator.count(0);
    }
    action drop_unknown_job() {
        unknown_job_drops.count(0);
        mark_to_drop(standard_metadata);
    }
    table inc_job {
        key = { hdr.inc.job_id : exact; }
        actions = { set_job; forward_to_aggregator; drop_unknown_job; }
        const default_action = drop_unknown_job();
        size = 64;
    }

    // A worker id is only accepted on the port its worker is cabled to, so a host
    // cannot contribute (or ask for results) as another worker or another job.
    action admit_worker() {
        meta.worker_bit = (bit<32>)1 << hdr.inc.worker_id;
    }
    action drop_spoofed_worker() {
        spoofed_worker_drops.count(0);
        mark_to_drop(standard_metadata);
    }
    table inc_worker {
        key = {
            hdr.inc.job_id                 : exact;
            hdr.inc.worker_id              : exact;
            standard_metadata.ingress_port : exact;
        }
        actions = { admit_worker; drop_spoofed_worker; }
        const default_action = drop_spoofed_worker();
        size = 1024;
    }

    action drop_slot_out_of_range() {
        slot_range_drops.count(0);
        mark_to_drop(standard_metadata);
    }

    /*** Aggregation, per slot (the SwitchML scheme with round numbers) ***/

    action read_slot() {
        slot_seen.read(meta.seen, meta.slot);
        slot_count.read(meta.count, meta.slot);
        slot_seq.read(meta.stored_seq, meta.slot);
        slot_flags.read(meta.flags, meta.slot);
        slot_need.read(meta.need, meta.slot);
    }

    // The first contribution of a round overwrites whatever the slot held, so a
    // finished round needs no clearing. Its elements: STORE_BLOCK, in apply.
    action start_round() {
        meta.seen = meta.worker_bit;
        meta.count = 1;
        meta.flags = hdr.inc.flags & ROUND_FLAGS;
        meta.need = hdr.inc.need;
        slot_seq.write(meta.slot, hdr.inc.seq);
        contributions.count(0);
    }

    // A contribution joins the round. Its elements, which ADD_BLOCK (in apply) combined into
    // the slot before, said in meta.overflow whether a sum wrapped.
    action add_contribution() {
        meta.seen = meta.seen | meta.worker_bit;
        meta.count = meta.count + 1;
        meta.flags = meta.flags | (hdr.inc.flags & ROUND_FLAGS)
                     | (meta.overflow[31:31] == 1 && hdr.inc.reduce_op == REDUCE_SUM ? FLAG_OVERFLOW : 8w0);
        meta.need = ((int<8>)hdr.inc.need > (int<8>)meta.need) ? hdr.inc.need : meta.need;
        contributions.count(0);
    }

    action write_slot() {
        slot_seen.write(meta.slot, meta.seen);
        slot_count.write(meta.slot, meta.count);
        slot_flags.write(meta.slot, meta.flags);
        slot_need.write(meta.slot, meta.need);
    }

    // The packet holds the sum now: it becomes the result, one copy per worker.
    action multicast_result() {
        hdr.inc.opcode = OP_RESULT;
        hdr.inc.flags = meta.flags;
        hdr.inc.need = meta.need;
        standard_metadata.mcast_grp = meta.mcast_grp;
        meta.inc_reply = true;
        meta.inc_multicast = true;
        results_multicast.count(0);
    }

    // A worker that lost the result retransmits: send it the stored result alone (its
    // elements: LOAD_BLOCK, in apply).
    action resend_result() {
        hdr.inc.opcode = OP_RESULT;
        hdr.inc.flags = meta.flags | FLAG_RESENT;
        hdr.inc.need = meta.need;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
        meta.inc_reply = true;
        meta.dest_worker = hdr.inc.worker_id;
        results_resent.count(0);
    }

    // The element steps, one block at a time. A packet carries only the blocks its count needs,
    // and a v1model action cannot skip the register accesses of the blocks it lacks, so these
    // are written out in apply, each under its block's isValid().
    // A round's first contribution stores its blocks and zeros in place of those it lacks: a
    // round whose packets carried different counts sums as if each had carried all K elements.
#define STORE_ELEMENT(b, f) slot_values.write(meta.value_base + 32 * (b) + f, hdr.blocks[b].e##f);
#define CLEAR_ELEMENT(b, f) slot_values.write(meta.value_base + 32 * (b) + f, 0);
#define STORE_BLOCK(b) \
        if (hdr.blocks[b].isValid()) { IN_BLOCK(STORE_ELEMENT, b) } else { IN_BLOCK(CLEAR_ELEMENT, b) }
    // Signed overflow of s = a + b: a and b have the same sign and s the other one,
    // i.e. bit 31 of (a ^ s) & (b ^ s). For min and max the contribution is kept where
    // it is below (min) or not below (max) the stored value; they cannot overflow.
    // The packet is left holding the partial result. The op's tests, the slot's base and the
    // overflow bits are locals across the elements, which a target keeps in registers.
#define ADD_ELEMENT(b, f)                                                      \
        value = hdr.blocks[b].e##f;                                            \
        slot_values.read(stored, base + 32 * (b) + f);                         \
        sum = stored + value;                                                  \
        overflow = overflow | ((stored ^ sum) & (value ^ sum));                \
        combined = is_sum ? sum                                                \
            : (((int<32>)value < (int<32>)stored) == lower_wins ? value : stored); \
        slot_values.write(base + 32 * (b) + f, combined);                      \
        hdr.blocks[b].e##f = combined;
#define ADD_BLOCK(b) if (hdr.blocks[b].isValid()) { IN_BLOCK(ADD_ELEMENT, b) }
#define LOAD_ELEMENT(b, f) slot_values.read(hdr.blocks[b].e##f, meta.value_base + 32 * (b) + f);
#define LOAD_BLOCK(b) if (hdr.blocks[b].isValid()) { IN_BLOCK(LOAD_ELEMENT, b) }
    // A JOIN stands for the count's elements, all zero.
#define ZERO_ELEMENT(b, f) hdr.blocks[b].e##f = 0;
#define JOIN_BLOCK(b) if (blocks > (b)) { hdr.blocks[b].setValid(); IN_BLOCK(ZERO_ELEMENT, b) }

    action drop_duplicate() {
        duplicate_drops.count(0);
        mark_to_drop(standard_metadata);
    }
    action drop_stale() {
        stale_drops.count(0);
        mark_to_drop(standard_metadata);
    }
    // Not the last contribution: it lives on in the registers.
    action consume() {
        mark_to_drop(standard_metadata);
    }

    apply {
        meta.ingress_port = standard_metadata.ingress_port;

        if (hdr.arp.isValid()) {
            if (hdr.arp.oper == ARP_REQUEST && hdr.arp.tpa == AGG_IP) {
                answer_arp_for_aggregator();
                return;
            }
        }
        if (!hdr.ipv4.isValid() || hdr.ipv4.dstAddr != AGG_IP) {
            if (hdr.ipv4.isValid()) {
                if (ipv4_lpm.apply().hit) {
                    return;
                }
            }
            l2_forward.apply();
            return;
        }

        // Addressed to the aggregator: it must be a whole, well-formed contribution (or JOIN).
        // Every check comes before the first register access.
        // The lengths must say exactly one contribution, its count's blocks (a JOIN: the header
        // alone), in one unfragmented datagram: bytes the lengths disown, or a fragment, are not
        // a contribution.
        if (!hdr.udp.isValid() || hdr.udp.dstPort != INC_PORT || !hdr.inc.isValid()
                || standard_metadata.checksum_error == 1 || standard_metadata.parser_error != error.NoError
                || hdr.ipv4.version != 4 || hdr.ipv4.fragOffset != 0
                || (hdr.ipv4.flags & IPV4_MORE_FRAGMENTS) != 0) {
            drop_malformed();
            return;
        }
        bit<16> blocks = BLOCKS(hdr.inc.count);
        bit<16> data_bytes = hdr.inc.opcode == OP_JOIN ? 16w0 : blocks * BLOCK_BYTES;
        if (hdr.ipv4.totalLen != INC_HEADER_IPV4_LEN + data_bytes || hdr.udp.len != INC_HEADER_UDP_LEN + data_bytes) {
            drop_malformed();
            return;
        }
        if (hdr.inc.version != INC_VERSION) {
            drop_bad_version();
            return;
        }
        // Between the levels of a hierarchical job, partials go up as contributions and the
        // spine's result comes down as a result; both carry FLAG_PARTIAL and always carry data.
        bool partial = (hdr.inc.flags & FLAG_PARTIAL) != 0;
        bool from_spine = partial && hdr.inc.opcode == OP_RESULT;
        // A root's window ACK: a Reduce's, on one level.
        bool window_ack = hdr.inc.opcode == OP_WINDOW_ACK && hdr.inc.collective == COLL_REDUCE && !partial;
        if ((hdr.inc.opcode != OP_CONTRIB && hdr.inc.opcode != OP_JOIN && !from_spine && !window_ack)
                || (partial && hdr.inc.opcode == OP_JOIN)
                || hdr.inc.count == 0 || hdr.inc.count > INC_K
                || hdr.inc.reduce_op > REDUCE_MAX || hdr.inc.collective > COLL_BARRIER) {
            drop_malformed();
            return;
        }
        // Data comes from every worker (AllReduce, Reduce), from the root alone (Broadcast)
        // or from nobody (Barrier). A JOIN adds zeros, so Broadcast and Barrier must sum.
        bool sends_data = hdr.inc.collective == COLL_ALLREDUCE || hdr.inc.collective == COLL_REDUCE
            || (hdr.inc.collective == COLL_BROADCAST && hdr.inc.worker_id == (bit<8>)hdr.inc.root);
        // An eager round is a Broadcast's, on one level: the partials of two levels need every leaf.
        bool eager = (hdr.inc.flags & FLAG_EAGER) != 0;
        if ((!partial && !window_ack && sends_data != (hdr.inc.opcode == OP_CONTRIB))
                || (hdr.inc.collective >= COLL_BROADCAST && hdr.inc.reduce_op != REDUCE_SUM)
                || (eager && (partial || hdr.inc.collective != COLL_BROADCAST))) {
            drop_malformed();
            return;
        }
        if (!inc_job.apply().hit) {
            return;
        }
        if (meta.inc_forwarded) {
            return;
        }
        // Worker ids are the job's own on a switch its workers are cabled to; a leaf's workers
        // and a spine's leaves are only some of them, so there the root cannot be checked.
        if ((from_spine && !meta.leaf_job) || ((eager || window_ack) && meta.leaf_job)
                || (!meta.leaf_job && !partial && (bit<8>)hdr.inc.root >= meta.num_workers)) {
            drop_malformed();
            return;
        }
        if (!inc_worker.apply().hit) {
            return;
        }
        // A window ACK is the root's own and touches no slot: it goes to the job's workers.
        if (window_ack) {
            if (hdr.inc.worker_id != (bit<8>)hdr.inc.root) {
                drop_malformed();
                return;
            }
            standard_metadata.mcast_grp = meta.mcast_grp;
            meta.inc_reply = true;
            meta.inc_multicast = true;
            return;
        }
        if ((bit<16>)hdr.inc.slot >= meta.num_slots
                || (bit<32>)meta.slot_base + (bit<32>)hdr.inc.slot >= POOL_SIZE) {
            drop_slot_out_of_range();
            return;
        }

        // Each slot has two copies; a worker flips pool_version each time it reuses the
        // slot, so the previous round's result stays available for retransmissions
        // while the next round fills the other copy.
        meta.slot = (bit<32>)meta.slot_base + (bit<32>)hdr.inc.slot;
        if (hdr.inc.pool_version == 1) {
            meta.slot = meta.slot + POOL_SIZE;
        }
        meta.value_base = meta.slot * INC_K;
        // A JOIN is a chunk of zeros from here on; a result or resend built from it needs them.
        if (hdr.inc.opcode == OP_JOIN) {
            FOR_EACH_BLOCK(JOIN_BLOCK)
        }
        read_slot();

        // A round is identified by its seq. A complete slot starts a new round only for
        // a newer seq (serial-number order), so a late duplicate of an old round
        // cannot overwrite a result other workers may still need.
        bit<32> seq_delta = hdr.inc.seq - meta.stored_seq;
        meta.needed = (meta.flags & FLAG_EAGER) != 0 ? 8w1 : meta.num_workers;
        bool complete = meta.count >= meta.needed;
        // The spine's result, on a leaf, for the round this leaf completed: down to the leaf's
        // workers, as it is. The leaf keeps only its partial; a worker that lost the result
        // retransmits, and the leaf asks the spine again. The spine never contributes on a
        // leaf, so a member already in the round's bitmap is a worker posing as the spine.
        if (from_spine) {
            if ((meta.seen & meta.worker_bit) != 0) {
                drop_spoofed_worker();
            } else if (!complete || seq_delta != 0) {
                drop_stale();
            } else {
                // A middle tier (its round summed partials) passes the result down as one:
                // the switches below hand it to their workers by their collective's rule.
                meta.flags = (hdr.inc.flags & (FLAG_OVERFLOW | FLAG_RESENT | FLAG_RETRANSMIT))
                    | (meta.flags & FLAG_PARTIAL);
                meta.need = hdr.inc.need;
                multicast_result();
            }
            return;
        }
        // In an eager round the others' JOINs only ask again: the stored result if the root's
        // data made the round, else nothing yet (they ask again later). They never start one.
        if (eager && hdr.inc.opcode == OP_JOIN) {
            if (complete && seq_delta == 0) {
                FOR_EACH_BLOCK(LOAD_BLOCK)
                resend_result();
            } else {
                drop_stale();
            }
            return;
        }
        if (meta.count == 0 || (complete && seq_delta != 0 && seq_delta[31:31] == 0)) {
            FOR_EACH_BLOCK(STORE_BLOCK)
            start_round();
        } else if (seq_delta != 0) {
            drop_stale();
            return;
        } else if ((meta.seen & meta.worker_bit) != 0) {
            if (complete) {
                FOR_EACH_BLOCK(LOAD_BLOCK)
                resend_result();
                // A leaf has its partial alone: it goes to the spine again, which answers
                // with its stored result for all of this leaf's workers.
                if (meta.leaf_job) {
                    standard_metadata.mcast_grp = meta.mcast_grp | UP_GROUP;
                    meta.inc_multicast = true;
                    meta.inc_up = true;
                }
            } else {
                drop_duplicate();
            }
            return;
        } else {
            bool is_sum = hdr.inc.reduce_op == REDUCE_SUM;
            bool lower_wins = hdr.inc.reduce_op == REDUCE_MIN;
            bit<32> base = meta.value_base;
            bit<32> overflow = 0;
            bit<32> value;
            bit<32> stored;
            bit<32> sum;
            bit<32> combined;
            FOR_EACH_BLOCK(ADD_BLOCK)
            meta.overflow = overflow;
            add_contribution();
        }
        write_slot();
        meta.needed = (meta.flags & FLAG_EAGER) != 0 ? 8w1 : meta.num_workers;
        if (meta.count == meta.needed) {
            multicast_result();
            if (meta.leaf_job) {           // a leaf's sum is a partial: it goes to the spine
                standard_metadata.mcast_grp = meta.mcast_grp | UP_GROUP;
                meta.inc_up = true;
            }
        } else {
            consume();
        }
    }
}

/*************************************************************************
 ****************  E G R E S S   P R O C E S S I N G   *******************
 *************************************************************************/

control MyEgress(inout headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {

    counter(1, CounterType.packets) unknown_worker_addr_drops;  // result for a worker without inc_worker_addr

    // A result leaves from the aggregator's address to the worker's. UDP checksum 0
    // (none) is valid for IPv4 and saves summing the payload.
    action set_worker_addr(bit<48> mac, bit<32> ip, bit<16> udp_port) {
        hdr.ethernet.srcAddr = AGG_MAC;
        hdr.ethernet.dstAddr = mac;
        hdr.ipv4.srcAddr = AGG_IP;
        hdr.ipv4.dstAddr = ip;
        hdr.ipv4.ttl = 64;
        hdr.udp.srcPort = INC_PORT;
        hdr.udp.dstPort = udp_port;
        hdr.udp.checksum = 0;
        hdr.inc.worker_id = meta.dest_worker;
        meta.ipv4_changed = true;
    }
    action drop_unknown_worker_addr() {
        unknown_worker_addr_drops.count(0);
        mark_to_drop(standard_metadata);
    }
    table inc_worker_addr {
        key = {
            hdr.inc.job_id   : exact;
            meta.dest_worker : exact;
        }
        actions = { set_worker_addr; drop_unknown_worker_addr; }
        const default_action = drop_unknown_worker_addr();
        size = 1024;
    }

#define DROP_BLOCK(b) hdr.blocks[b].setInvalid();
    apply {
        if (meta.inc_reply) {
            // Multicast replicas carry the worker id as their rid.
            if (meta.inc_multicast) {
                meta.dest_worker = (bit<8>)standard_metadata.egress_rid;
            }
            inc_worker_addr.apply();
            if (meta.inc_up) {
                hdr.inc.opcode = OP_CONTRIB;
                hdr.inc.flags = hdr.inc.flags | FLAG_PARTIAL;
            }
            // Where the root acknowledges a Reduce's chunks (FLAG_WINDOW_ACKS), a round's result
            // goes to the root alone and the root's window ACK to the others alone.
            bool window_ack = hdr.inc.opcode == OP_WINDOW_ACK;
            bool to_root = meta.dest_worker == (bit<8>)hdr.inc.root;
            bool acked_by_root = hdr.inc.collective == COLL_REDUCE
                && (hdr.inc.flags & (FLAG_WINDOW_ACKS | FLAG_PARTIAL)) == FLAG_WINDOW_ACKS;
            if (meta.inc_multicast && ((window_ack && to_root) || (acked_by_root && !window_ack && !to_root))) {
                mark_to_drop(standard_metadata);
            }
            // A flat job's Broadcast and Barrier results say that this switch runs eager rounds,
            // its Reduce results that it takes window ACKs.
            if (!meta.leaf_job && (hdr.inc.flags & FLAG_PARTIAL) == 0 && hdr.inc.collective >= COLL_BROADCAST) {
                hdr.inc.flags = hdr.inc.flags | FLAG_EAGER;
            }
            if (!meta.leaf_job && (hdr.inc.flags & FLAG_PARTIAL) == 0 && hdr.inc.collective == COLL_REDUCE) {
                hdr.inc.flags = hdr.inc.flags | FLAG_WINDOW_ACKS;
            }
            // The data goes to every worker except: in a Reduce, to the root alone; in a
            // Barrier, to nobody. The others get the header alone, as an ACK. Between switches
            // the data always goes: the leaves apply this rule for their workers. A window ACK
            // keeps its elements.
            if (!window_ack && (hdr.inc.flags & FLAG_PARTIAL) == 0 && (hdr.inc.collective == COLL_BARRIER
                    || (hdr.inc.collective == COLL_REDUCE && meta.dest_worker != (bit<8>)hdr.inc.root))) {
                hdr.inc.opcode = OP_ACK;
                FOR_EACH_BLOCK(DROP_BLOCK)
                hdr.ipv4.totalLen = INC_HEADER_IPV4_LEN;
                hdr.udp.len = INC_HEADER_UDP_LEN;
            } else {
                bit<16> data_bytes = BLOCKS(hdr.inc.count) * BLOCK_BYTES;
                hdr.ipv4.totalLen = INC_HEADER_IPV4_LEN + data_bytes;
                hdr.udp.len = INC_HEADER_UDP_LEN + data_bytes;
            }
        } else if (meta.flooded && standard_metadata.egress_port == meta.ingress_port) {
            mark_to_drop(standard_metadata);
        }
    }
}

/*************************************************************************
 *************   C H E C K S U M    C O M P U T A T I O N   **************
 *************************************************************************/

// Only routed packets and results have a rewritten IPv4 header; others keep theirs.
control MyComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid() && meta.ipv4_changed,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

/*************************************************************************
 ***********************  D E P A R S E R  *******************************
 *************************************************************************/

control MyDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.arp);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.inc);
        packet.emit(hdr.blocks);
    }
}

V1Switch(
    MyParser(),
    MyVerifyChecksum(),
    MyIngress(),
    MyEgress(),
    MyComputeChecksum(),
    MyDeparser()
) main;
