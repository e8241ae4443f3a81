/* -*- P4_16 -*- */
// Source routing: the sender lists the egress port of every hop in a stack of
// small headers after Ethernet; each switch pops the top one and sends the
// packet out of that port. The last hop (bottom of stack) restores the IPv4
// EtherType. Mirrors the P4 tutorials' "source_routing" exercise.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4    = 0x0800;
const bit<16> ETHERTYPE_SRCROUTE = 0x1234;

#define MAX_HOPS 9

typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

// bos marks the bottom of the stack: the hop after which IPv4 follows.
header srcroute_t {
    bit<1>  bos;
    bit<15> port;
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

struct metadata { }

struct headers {
    ethernet_t           ethernet;
    srcroute_t[MAX_HOPS] hops;
    ipv4_t               ipv4;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_SRCROUTE: parse_hop;
            default: accept;
        }
    }

    // More hops than the stack holds is a parser error (StackOutOfBounds);
    // v1model still runs ingress, with standard_metadata.parser_error set.
    state parse_hop {
        packet.extract(hdr.hops.next);
        transition select(hdr.hops.last.bos) {
            1: parse_ipv4;
            default: parse_hop;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
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

    action take_next_hop() {
        standard_metadata.egress_spec = (bit<9>)hdr.hops[0].port;
        hdr.hops.pop_front(1);
    }

    action end_of_route() {
        hdr.ethernet.etherType = ETHERTYPE_IPV4;
    }

    action decrement_ttl() {
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    apply {
        if (standard_metadata.parser_error != error.NoError) {
            // A route longer than MAX_HOPS, or a truncated one.
            drop();
        } else if (hdr.hops[0].isValid()) {
            if (hdr.hops[0].bos == 1) {
                end_of_route();
            }
            take_next_hop();
            if (hdr.ipv4.isValid()) {
                decrement_ttl();
            }
        } else {
            // Not source-routed: this network does not forward it.
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
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
              hdr.ipv4.totalLen, hdr.ipv4.identification,
              hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.hops);
        packet.emit(hdr.ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
