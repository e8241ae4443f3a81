/* -*- P4_16 -*- */
// L2 forwarding with flooding: a known destination MAC goes out of its port,
// anything else is replicated to a multicast group by the packet replication
// engine, and egress prunes the copy that would return to the ingress port.
// Mirrors the P4 tutorials' "multicast" exercise.
#include <core.p4>
#include <v1model.p4>

const bit<16> FLOOD_GROUP = 1;
#define MAX_PORTS 64

typedef bit<9>  port_t;
typedef bit<48> mac_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

struct metadata { }

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
    action drop() {
        mark_to_drop(standard_metadata);
    }

    action flood(bit<16> group) {
        standard_metadata.mcast_grp = group;
    }

    action mac_forward(port_t port) {
        standard_metadata.egress_spec = port;
    }

    table mac_lookup {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { flood; mac_forward; drop; }
        size = 1024;
        default_action = flood(FLOOD_GROUP);
    }

    apply {
        if (hdr.ethernet.isValid()) {
            mac_lookup.apply();
        } else {
            drop();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    // Copies that leave the switch, per egress port.
    counter(MAX_PORTS, CounterType.packets) tx_copies;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    apply {
        // Never send a flooded frame back where it came from.
        if (standard_metadata.egress_port == standard_metadata.ingress_port) {
            drop();
        } else {
            tx_copies.count((bit<32>)standard_metadata.egress_port);
        }
    }
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
