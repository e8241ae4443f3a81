/* -*- P4_16 -*- */
// An MPLS label switch over a header stack: the parser extracts labels with
// .next until the bottom-of-stack bit (.last), the top label picks swap, push
// or pop. Popping the last label turns the frame back into IPv4. More labels
// than the stack holds is a parser error (StackOutOfBounds), and dropped.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_MPLS = 0x8847;
#define MAX_LABELS 4

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header mpls_t {
    bit<20> label;
    bit<3>  tc;
    bit<1>  bos;
    bit<8>  ttl;
}

struct metadata { }

struct headers {
    ethernet_t         ethernet;
    mpls_t[MAX_LABELS] mpls;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_MPLS: parse_mpls;
            default: accept;
        }
    }

    state parse_mpls {
        packet.extract(hdr.mpls.next);
        transition select(hdr.mpls.last.bos) {
            1: accept;
            default: parse_mpls;
        }
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

    action swap(bit<20> label, port_t port) {
        hdr.mpls[0].label = label;
        hdr.mpls[0].ttl = hdr.mpls[0].ttl - 1;
        standard_metadata.egress_spec = port;
    }

    // The new top label inherits the old top's TTL, minus this hop.
    action push(bit<20> label, port_t port) {
        hdr.mpls.push_front(1);
        hdr.mpls[0].setValid();
        hdr.mpls[0].label = label;
        hdr.mpls[0].tc = hdr.mpls[1].tc;
        hdr.mpls[0].bos = 0;
        hdr.mpls[0].ttl = hdr.mpls[1].ttl - 1;
        standard_metadata.egress_spec = port;
    }

    action pop(port_t port) {
        hdr.mpls.pop_front(1);
        standard_metadata.egress_spec = port;
    }

    table lfib {
        key = { hdr.mpls[0].label : exact; }
        actions = { swap; push; pop; drop; }
        size = 64;
        default_action = drop();
    }

    apply {
        if (standard_metadata.parser_error != error.NoError || !hdr.mpls[0].isValid()) {
            drop();
        } else {
            lfib.apply();
            if (!hdr.mpls[0].isValid()) {
                hdr.ethernet.etherType = ETHERTYPE_IPV4;
            }
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
        packet.emit(hdr.mpls);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
