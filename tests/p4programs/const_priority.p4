/* -*- P4_16 -*- */
// Const entries with explicit priorities: `@priority(N)` after an entry's
// action. Entries are listed here in the opposite order of their priorities,
// so the priority, not the order, decides. In BMv2 the numerically smaller
// priority wins among const entries (p4c copies N into the JSON verbatim).
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

    action set_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    table classify {
        key = { hdr.ethernet.etherType : ternary; }
        actions = { set_port; drop; }
        const default_action = drop();
        const entries = {
            16w0x0000 &&& 16w0x0000 : set_port(1) @priority(30);   // anything
            16w0x0800 &&& 16w0xFF00 : set_port(2) @priority(20);   // 0x08xx
            16w0x0806 &&& 16w0xFFFF : set_port(3) @priority(10);   // ARP exactly
        }
    }

    apply {
        classify.apply();
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
