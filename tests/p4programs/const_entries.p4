/* -*- P4_16 -*- */
// A classifier whose entries are fixed in the program: exact values, a
// ternary mask, ranges and don't-cares (`_`). Among const entries that match,
// the one listed first wins. The key's L4 port comes from UDP or TCP.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_ICMP  = 1;
const bit<8>  IP_PROTO_TCP   = 6;
const bit<8>  IP_PROTO_UDP   = 17;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      diffserv;
    bit<16>     totalLen;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     fragOffset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdrChecksum;
    ipv4_addr_t srcAddr;
    ipv4_addr_t dstAddr;
}

// The two L4 headers begin with the same two port fields.
header l4_ports_t {
    bit<16> srcPort;
    bit<16> dstPort;
}

struct metadata {
    bit<16> l4_dport;
}

struct headers {
    ethernet_t ethernet;
    ipv4_t     ipv4;
    l4_ports_t ports;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_TCP: parse_ports;
            IP_PROTO_UDP: parse_ports;
            default: accept;
        }
    }

    state parse_ports {
        packet.extract(hdr.ports);
        meta.l4_dport = hdr.ports.dstPort;
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
        key = {
            hdr.ipv4.protocol : ternary;
            meta.l4_dport     : range;
        }
        actions = { set_port; drop; }
        const default_action = drop();
        const entries = {
            (IP_PROTO_UDP, 53 .. 53)        : set_port(1);   // DNS
            (IP_PROTO_UDP, 1024 .. 65535)   : set_port(2);   // unprivileged UDP
            (0x06 &&& 0xFF, _)              : set_port(3);   // any TCP
            (_, 22 .. 22)                   : set_port(5);   // SSH, unless TCP above
            (IP_PROTO_ICMP, _)              : set_port(4);
        }
    }

    apply {
        if (hdr.ipv4.isValid()) {
            classify.apply();
        } else {
            drop();
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
        packet.emit(hdr.ipv4);
        packet.emit(hdr.ports);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
