/* -*- P4_16 -*- */
// Control constructor parameters: one control type, instantiated twice in
// egress with different compile-time arguments, rewrites the source MAC of
// frames leaving through its port to that port's MAC.
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

// Rewrites the source MAC when the frame leaves through `port`.
control PortMac(inout headers hdr,
                in standard_metadata_t standard_metadata)(port_t port, mac_t port_mac) {
    apply {
        if (standard_metadata.egress_port == port) {
            hdr.ethernet.srcAddr = port_mac;
        }
    }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = (port_t)hdr.ethernet.dstAddr[7:0];
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    PortMac(1, 0x000000000100) port1_mac;
    PortMac(2, 0x000000000200) port2_mac;

    apply {
        port1_mac.apply(hdr, standard_metadata);
        port2_mac.apply(hdr, standard_metadata);
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
