/* -*- P4_16 -*- */
// Functions with out and inout parameters (copy-in/copy-out): a reflector
// swaps the MAC addresses with an inout function, splits a 16-bit id into its
// bytes with out parameters, and computes a ones'-complement sum with a
// function that returns a value. The answer goes back out of the ingress port.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_REFLECT = 0x88BE;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header reflect_t {
    bit<16> id;
    bit<8>  id_hi;
    bit<8>  id_lo;
    bit<16> a;
    bit<16> b;
    bit<16> ones_sum;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    reflect_t  reflect;
}

void swap(inout mac_t x, inout mac_t y) {
    mac_t tmp = x;
    x = y;
    y = tmp;
}

void split(in bit<16> value, out bit<8> hi, out bit<8> lo) {
    hi = value[15:8];
    lo = value[7:0];
}

// The 16-bit ones'-complement sum: the carry out of bit 15 wraps around.
bit<16> ones_complement_add(in bit<16> x, in bit<16> y) {
    bit<17> sum = (bit<17>)x + (bit<17>)y;
    return sum[15:0] + (bit<16>)sum[16:16];
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_REFLECT: parse_reflect;
            default: accept;
        }
    }

    state parse_reflect {
        packet.extract(hdr.reflect);
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
        if (hdr.reflect.isValid()) {
            swap(hdr.ethernet.dstAddr, hdr.ethernet.srcAddr);
            split(hdr.reflect.id, hdr.reflect.id_hi, hdr.reflect.id_lo);
            hdr.reflect.ones_sum = ones_complement_add(hdr.reflect.a, hdr.reflect.b);
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
        packet.emit(hdr.reflect);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
