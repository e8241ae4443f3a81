/* -*- P4_16 -*- */
// Saturating arithmetic next to wrap-around arithmetic on bit<8>, and
// saturating arithmetic on int<8> (values cast from the unsigned fields):
// |+| and |-| clamp at the type's bounds where + and - wrap modulo 2^8.
// The answer goes back out of the port the request came in on.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_ARITH = 0x88B6;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header arith_t {
    bit<8> a;
    bit<8> b;
    bit<8> add_wrap;
    bit<8> sub_wrap;
    bit<8> add_sat;
    bit<8> sub_sat;
    bit<8> signed_add_sat;
    bit<8> signed_sub_sat;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    arith_t    arith;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_ARITH: parse_arith;
            default: accept;
        }
    }

    state parse_arith {
        packet.extract(hdr.arith);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        if (hdr.arith.isValid()) {
            hdr.arith.add_wrap = hdr.arith.a + hdr.arith.b;
            hdr.arith.sub_wrap = hdr.arith.a - hdr.arith.b;
            hdr.arith.add_sat = hdr.arith.a |+| hdr.arith.b;
            hdr.arith.sub_sat = hdr.arith.a |-| hdr.arith.b;
            int<8> sa = (int<8>)hdr.arith.a;
            int<8> sb = (int<8>)hdr.arith.b;
            hdr.arith.signed_add_sat = (bit<8>)(sa |+| sb);
            hdr.arith.signed_sub_sat = (bit<8>)(sa |-| sb);
            standard_metadata.egress_spec = standard_metadata.ingress_port;
        } else {
            mark_to_drop(standard_metadata);
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.arith);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
