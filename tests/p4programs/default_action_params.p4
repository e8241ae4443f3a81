/* -*- P4_16 -*- */
// Default actions with parameters. `forward` misses to set_port(7) until the
// controller installs another default; `stamp` has no key and a const default
// action that writes the source MAC, which the controller cannot change.
#include <core.p4>
#include <v1model.p4>

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

const mac_t SWITCH_MAC = 0x00000000AB01;

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
    action set_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    action set_src(mac_t src) {
        hdr.ethernet.srcAddr = src;
    }

    table forward {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { set_port; }
        size = 64;
        default_action = set_port(7);
    }

    table stamp {
        actions = { set_src; }
        const default_action = set_src(SWITCH_MAC);
    }

    apply {
        forward.apply();
        stamp.apply();
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
