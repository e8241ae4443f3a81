/* -*- P4_16 -*- */
// Per-port statistics in indirect counters: frames received per ingress port
// (a packet counter indexed in ingress) and bytes sent per egress port (a
// byte counter indexed in egress). Every frame goes to the port in its
// destination MAC's last byte.
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
    counter(512, CounterType.packets) rx_frames;

    apply {
        rx_frames.count((bit<32>)standard_metadata.ingress_port);
        standard_metadata.egress_spec = (port_t)hdr.ethernet.dstAddr[7:0];
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    counter(512, CounterType.bytes) tx_bytes;

    apply {
        tx_bytes.count((bit<32>)standard_metadata.egress_port);
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
