/* -*- P4_16 -*- */
// The same two 16-bit fields compared as unsigned (bit<16>) and as signed
// (int<16>, two's complement): 0x8000 is the largest unsigned value of the
// pair in one view and the smallest in the other. Each comparison sets one
// flag bit; the signed maximum and minimum come from ?:.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_CMP = 0x88B6;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header cmp_t {
    bit<16> a;
    bit<16> b;
    bit<1>  unsigned_lt;
    bit<1>  unsigned_ge;
    bit<1>  signed_lt;
    bit<1>  signed_le;
    bit<1>  signed_gt;
    bit<1>  signed_ge;
    bit<1>  equal;
    bit<1>  not_equal;
    bit<16> signed_max;
    bit<16> signed_min;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    cmp_t      cmp;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_CMP: parse_cmp;
            default: accept;
        }
    }

    state parse_cmp {
        packet.extract(hdr.cmp);
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
        if (hdr.cmp.isValid()) {
            int<16> a = (int<16>)hdr.cmp.a;
            int<16> b = (int<16>)hdr.cmp.b;
            hdr.cmp.unsigned_lt = (bit<1>)(hdr.cmp.a < hdr.cmp.b);
            hdr.cmp.unsigned_ge = (bit<1>)(hdr.cmp.a >= hdr.cmp.b);
            hdr.cmp.signed_lt = (bit<1>)(a < b);
            hdr.cmp.signed_le = (bit<1>)(a <= b);
            hdr.cmp.signed_gt = (bit<1>)(a > b);
            hdr.cmp.signed_ge = (bit<1>)(a >= b);
            hdr.cmp.equal = (bit<1>)(a == b);
            hdr.cmp.not_equal = (bit<1>)(hdr.cmp.a != hdr.cmp.b);
            hdr.cmp.signed_max = (bit<16>)(a > b ? a : b);
            hdr.cmp.signed_min = (bit<16>)(a < b ? a : b);
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
        packet.emit(hdr.cmp);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
