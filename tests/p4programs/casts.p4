/* -*- P4_16 -*- */
// Casts between widths and signedness: an 8-bit value zero-extended to 32
// bits, sign-extended (through int<8> and int<32>) to 32 and 16 bits,
// truncated to its low nibble, and its sign bit as a bool cast to a bit.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_CAST = 0x88B6;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header cast_t {
    bit<8>  x;
    bit<32> zero_extended;
    bit<32> sign_extended;
    bit<16> sign_extended_16;
    bit<4>  low_nibble;
    bit<4>  negative;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    cast_t     cast;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_CAST: parse_cast;
            default: accept;
        }
    }

    state parse_cast {
        packet.extract(hdr.cast);
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
        if (hdr.cast.isValid()) {
            int<8> s = (int<8>)hdr.cast.x;
            hdr.cast.zero_extended = (bit<32>)hdr.cast.x;
            hdr.cast.sign_extended = (bit<32>)(int<32>)s;
            hdr.cast.sign_extended_16 = (bit<16>)(int<16>)s;
            hdr.cast.low_nibble = (bit<4>)hdr.cast.x;
            hdr.cast.negative = (bit<4>)(bit<1>)(s < 0);
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
        packet.emit(hdr.cast);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
