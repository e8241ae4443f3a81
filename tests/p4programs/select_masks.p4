/* -*- P4_16 -*- */
// Parser branching with every keyset form of select: a tuple of exact
// values, a mask (&&&), a range (..), the don't-care `_` and `default`.
// The state a packet ends in picks its output port (meta.path); cases are
// tried in order and the first that matches wins.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_KIND = 0x88B6;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header kind_t {
    bit<8> kind;
    bit<8> sub;
}

struct metadata {
    bit<8> path;
}

struct headers {
    ethernet_t ethernet;
    kind_t     kind;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_KIND: parse_kind;
            default: accept;
        }
    }

    state parse_kind {
        packet.extract(hdr.kind);
        transition select(hdr.kind.kind, hdr.kind.sub) {
            (0x01, 0x01)         : exact_pair;
            (0x10 &&& 0xF0, _)   : masked;
            (0x20 .. 0x2F, 0x07) : ranged;
            (0x20 .. 0x2F, _)    : ranged_any;
            (_, 0x00 &&& 0x81)   : even_small_sub;
            default              : other;
        }
    }

    state exact_pair {
        meta.path = 1;
        transition accept;
    }

    state masked {
        meta.path = 2;
        transition accept;
    }

    state ranged {
        meta.path = 3;
        transition accept;
    }

    state ranged_any {
        meta.path = 4;
        transition accept;
    }

    state even_small_sub {
        meta.path = 5;
        transition accept;
    }

    state other {
        meta.path = 6;
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
        if (hdr.kind.isValid()) {
            standard_metadata.egress_spec = (port_t)meta.path;
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
        packet.emit(hdr.kind);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
