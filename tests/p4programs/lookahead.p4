/* -*- P4_16 -*- */
// A protocol with two header versions told apart by the version nibble of
// their first byte: the parser peeks at it with lookahead (which consumes
// nothing) and extracts the short or the long form. A version-1 header is
// rewritten to version 2 on the way out, so the switch translates between them.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_TAG = 0x88B7;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header tag_v1_t {
    bit<4>  version;
    bit<4>  flags;
    bit<8>  channel;
    bit<16> length;
}

header tag_v2_t {
    bit<4>  version;
    bit<4>  flags;
    bit<8>  channel;
    bit<16> length;
    bit<32> stream;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    tag_v1_t   v1;
    tag_v2_t   v2;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_TAG: parse_tag;
            default: accept;
        }
    }

    state parse_tag {
        transition select(packet.lookahead<bit<4>>()) {
            1: parse_v1;
            2: parse_v2;
            default: accept;
        }
    }

    state parse_v1 {
        packet.extract(hdr.v1);
        transition accept;
    }

    state parse_v2 {
        packet.extract(hdr.v2);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    // A v1 header becomes the v2 form with stream 0.
    action upgrade() {
        hdr.v2.setValid();
        hdr.v2.version = 2;
        hdr.v2.flags = hdr.v1.flags;
        hdr.v2.channel = hdr.v1.channel;
        hdr.v2.length = hdr.v1.length + 4;
        hdr.v2.stream = 0;
        hdr.v1.setInvalid();
    }

    apply {
        if (hdr.v1.isValid()) {
            upgrade();
            standard_metadata.egress_spec = 1;
        } else if (hdr.v2.isValid()) {
            standard_metadata.egress_spec = 2;
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
        packet.emit(hdr.v1);
        packet.emit(hdr.v2);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
