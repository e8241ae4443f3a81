/* -*- P4_16 -*- */
// Action arguments bound in a table's action list: `count_into(hdr.stats.hits)`
// binds the directional (inout) parameter to a header field for every entry,
// while the entry supplies only the step. The same action is also called
// directly with both arguments.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_STATS = 0x88BF;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header stats_t {
    bit<8>  kind;
    bit<16> hits;
    bit<16> misses;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    stats_t    stats;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_STATS: parse_stats;
            default: accept;
        }
    }

    state parse_stats {
        packet.extract(hdr.stats);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action count_into(inout bit<16> counter_field, bit<16> step) {
        counter_field = counter_field + step;
    }

    table kinds {
        key = { hdr.stats.kind : exact; }
        actions = { count_into(hdr.stats.hits); NoAction; }
        size = 64;
        default_action = NoAction();
    }

    apply {
        if (hdr.stats.isValid()) {
            if (!kinds.apply().hit) {
                count_into(hdr.stats.misses, 1);
            }
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
        packet.emit(hdr.stats);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
