/* -*- P4_16 -*- */
// A byte meter attached to each entry of a table (a direct meter): the entry
// that forwards a flow also colours it, and the colour travels in the frame's
// EtherType low bits so the receiver sees it (0 green, 1 yellow, 2 red).
#include <core.p4>
#include <v1model.p4>

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

struct metadata {
    bit<2> color;
}

struct headers {
    ethernet_t ethernet;
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
    direct_meter<bit<2>>(MeterType.bytes) flow_meter;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action forward_metered(port_t port) {
        flow_meter.read(meta.color);
        standard_metadata.egress_spec = port;
    }

    table flows {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { forward_metered; drop; }
        size = 16;
        default_action = drop();
        meters = flow_meter;
    }

    apply {
        meta.color = 0;
        if (flows.apply().hit) {
            hdr.ethernet.etherType = hdr.ethernet.etherType[15:2] ++ meta.color;
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
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
