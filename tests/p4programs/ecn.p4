/* -*- P4_16 -*- */
// ECN marking: an ECN-capable packet that leaves through a queue deeper than
// the threshold gets Congestion Experienced (11) instead of being dropped.
// Mirrors the P4 tutorials' "ecn" exercise; the threshold can be set per port
// (a threshold of 0 marks every ECN-capable packet on that port).
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<2>  ECN_NOT_ECT    = 0;
const bit<2>  ECN_ECT1       = 1;
const bit<2>  ECN_ECT0       = 2;
const bit<2>  ECN_CE         = 3;
const bit<19> DEFAULT_ECN_THRESHOLD = 10;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;
typedef bit<19> qdepth_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

// The old TOS byte split into DSCP and the two ECN bits (RFC 3168).
header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     totalLen;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     fragOffset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdrChecksum;
    ipv4_addr_t srcAddr;
    ipv4_addr_t dstAddr;
}

struct metadata {
    qdepth_t ecn_threshold;
}

struct headers {
    ethernet_t ethernet;
    ipv4_t     ipv4;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }

    action ipv4_forward(mac_t dstAddr, port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { ipv4_forward; drop; NoAction; }
        size = 1024;
        default_action = drop();
    }

    apply {
        if (hdr.ipv4.isValid()) {
            ipv4_lpm.apply();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    action set_ecn_threshold(qdepth_t threshold) {
        meta.ecn_threshold = threshold;
    }

    table ecn_threshold {
        key = { standard_metadata.egress_port : exact; }
        actions = { set_ecn_threshold; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    action mark_ecn() {
        hdr.ipv4.ecn = ECN_CE;
    }

    apply {
        meta.ecn_threshold = DEFAULT_ECN_THRESHOLD;
        ecn_threshold.apply();
        // Not-ECT traffic is never marked; CE stays CE.
        if (hdr.ipv4.isValid() &&
            (hdr.ipv4.ecn == ECN_ECT1 || hdr.ipv4.ecn == ECN_ECT0)) {
            if (standard_metadata.enq_qdepth >= meta.ecn_threshold) {
                mark_ecn();
            }
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.totalLen, hdr.ipv4.identification,
              hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
