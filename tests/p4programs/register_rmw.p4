/* -*- P4_16 -*- */
// A sequence number per ingress port, kept in a register: each frame reads
// its port's cell, adds one (wrapping at 2^32) and writes it back, and the
// switch inserts the new value in a seq header after Ethernet.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_SEQ = 0x88B5;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header seq_t {
    bit<32> seq;
    bit<16> etherType;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    seq_t      seq;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    register<bit<32>>(512) last_seq;

    action stamp(bit<32> seq) {
        hdr.seq.setValid();
        hdr.seq.seq = seq;
        hdr.seq.etherType = hdr.ethernet.etherType;
        hdr.ethernet.etherType = ETHERTYPE_SEQ;
    }

    apply {
        bit<32> index = (bit<32>)standard_metadata.ingress_port;
        bit<32> seq;
        last_seq.read(seq, index);
        seq = seq + 1;
        last_seq.write(index, seq);
        stamp(seq);
        standard_metadata.egress_spec = 1;
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
        packet.emit(hdr.seq);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
