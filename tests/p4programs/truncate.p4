/* -*- P4_16 -*- */
// Snapshots with truncate: frames to a sampling port are cut to the length
// the port's entry gives (headers and the first payload bytes), as a
// monitoring tap would keep them; frames from a sampled source are cut in
// ingress already. Where both apply, the shorter length wins (BMv2 keeps the
// smallest length a packet was truncated to). A length longer than the frame
// changes nothing.
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
    action snapshot(bit<32> length) {
        truncate(length);
    }

    table sampled_sources {
        key = { hdr.ethernet.srcAddr : exact; }
        actions = { snapshot; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    apply {
        standard_metadata.egress_spec = (port_t)hdr.ethernet.dstAddr[7:0];
        sampled_sources.apply();
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    action snapshot(bit<32> length) {
        truncate(length);
    }

    table sampling_ports {
        key = { standard_metadata.egress_port : exact; }
        actions = { snapshot; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    apply {
        sampling_ports.apply();
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
