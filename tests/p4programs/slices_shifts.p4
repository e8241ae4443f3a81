/* -*- P4_16 -*- */
// Bit manipulation on a 32-bit word: halves swapped with slices and ++,
// a rotate built from two shifts, shifts by a run-time amount (a left or
// logical right shift by 32 or more gives 0), an arithmetic right shift of
// the word as int<32>, and a middle slice.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_BITS = 0x88B6;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header bits_t {
    bit<32> x;
    bit<8>  n;
    bit<32> swapped;
    bit<32> rotated;
    bit<32> shl;
    bit<32> shr;
    bit<32> sar;
    bit<16> middle;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    bits_t     bits;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_BITS: parse_bits;
            default: accept;
        }
    }

    state parse_bits {
        packet.extract(hdr.bits);
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
        if (hdr.bits.isValid()) {
            bit<32> x = hdr.bits.x;
            // Rotations and arithmetic shifts use the amount modulo 32.
            bit<8> r = (bit<8>)hdr.bits.n[4:0];
            hdr.bits.swapped = x[15:0] ++ x[31:16];
            hdr.bits.rotated = (x << r) | (x >> (8w32 - r));
            hdr.bits.shl = x << hdr.bits.n;
            hdr.bits.shr = x >> hdr.bits.n;
            hdr.bits.sar = (bit<32>)((int<32>)x >> r);
            hdr.bits.middle = x[23:8];
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
        packet.emit(hdr.bits);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
