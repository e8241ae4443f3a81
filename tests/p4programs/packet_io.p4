/* -*- P4_16 -*- */
// Packet I/O with a controller: frames the ACL punts reach the CPU port with a
// packet_in header saying where they came from; a packet_out from the
// controller names the port to send its frame out of. Unknown source MACs are
// reported in a digest, as an L2 learning switch does. Run the switch with
// --cpu-port 255 (CPU_PORT below).
#include <core.p4>
#include <v1model.p4>

const bit<9> CPU_PORT = 255;

typedef bit<9>  port_t;
typedef bit<48> mac_t;

@controller_header("packet_in")
header packet_in_t {
    port_t  ingress_port;
    bit<7>  _pad;
}

@controller_header("packet_out")
header packet_out_t {
    port_t  egress_port;
    bit<7>  _pad;
}

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

struct learn_t {
    mac_t  srcAddr;
    port_t ingress_port;
}

struct metadata { }

struct headers {
    packet_in_t  packet_in;
    packet_out_t packet_out;
    ethernet_t   ethernet;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    // Only frames from the controller carry a packet_out header.
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }

    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }

    state parse_ethernet {
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
    direct_counter(CounterType.packets_and_bytes) acl_counter;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action send_to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
    }

    table acl {
        key = {
            standard_metadata.ingress_port : ternary;
            hdr.ethernet.dstAddr           : ternary;
            hdr.ethernet.etherType         : ternary;
        }
        actions = { send_to_cpu; drop; NoAction; }
        size = 256;
        default_action = NoAction();
        counters = acl_counter;
    }

    action learn() {
        digest<learn_t>(1, { hdr.ethernet.srcAddr, standard_metadata.ingress_port });
    }

    table smac {
        key = { hdr.ethernet.srcAddr : exact; }
        actions = { learn; NoAction; }
        size = 1024;
        default_action = learn();
    }

    action set_egress_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    table dmac {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { set_egress_port; drop; }
        size = 1024;
        default_action = drop();
    }

    apply {
        if (hdr.packet_out.isValid()) {
            // The controller chose the port: no lookups apply.
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            exit;
        }
        smac.apply();
        switch (acl.apply().action_run) {
            NoAction: { dmac.apply(); }
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            hdr.packet_in._pad = 0;
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
