/* -*- P4_16 -*- */
// Branching on which action a table ran: `switch (t.apply().action_run)`
// picks the next step per action, with a shared case body for two labels and
// a default case. A miss runs the default action, and the switch branches on
// that action too.
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

    action to_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    action to_cpu() {
        standard_metadata.egress_spec = 64;
    }

    action to_monitor() {
        standard_metadata.egress_spec = 65;
    }

    action unknown() { }

    table classify {
        key = { hdr.ethernet.etherType : exact; }
        actions = { to_port; to_cpu; to_monitor; unknown; drop; }
        size = 64;
        default_action = unknown();
    }

    action set_tag(bit<16> tag) {
        hdr.ethernet.etherType = tag;
    }

    table tag_special {
        key = { hdr.ethernet.srcAddr : exact; }
        actions = { set_tag; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    apply {
        switch (classify.apply().action_run) {
            to_cpu:
            to_monitor: {
                // Frames for the CPU or the monitor are marked as special.
                tag_special.apply();
            }
            unknown: {
                standard_metadata.egress_spec = 1;
            }
            default: { }
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
