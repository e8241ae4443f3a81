/* -*- P4_16 -*- */
// An IP-in-IP tunnel (RFC 2003): packets routed into a tunnel get an outer
// IPv4 header (protocol 4) from this endpoint to the remote one, whose length
// covers the inner packet; packets arriving through a tunnel to this endpoint
// lose the outer header and are routed on their inner destination.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_IPIP  = 4;

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

struct metadata { }

// outer_ipv4 is only added by encapsulation; ipv4 is what the parser finds
// first and inner_ipv4 the tunnelled packet of a packet that arrives encapsulated.
struct headers {
    ethernet_t ethernet;
    ipv4_t     outer_ipv4;
    ipv4_t     ipv4;
    ipv4_t     inner_ipv4;
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
            IP_PROTO_IPIP: parse_inner_ipv4;
            default: accept;
        }
    }

    state parse_inner_ipv4 {
        packet.extract(hdr.inner_ipv4);
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

    action forward(mac_t dstAddr, port_t port) {
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        standard_metadata.egress_spec = port;
    }

    // The outer header copies the inner TOS and starts with a fresh TTL.
    action encap(ipv4_addr_t local_ip, ipv4_addr_t remote_ip, mac_t dstAddr, port_t port) {
        hdr.outer_ipv4.setValid();
        hdr.outer_ipv4.version = 4;
        hdr.outer_ipv4.ihl = 5;
        hdr.outer_ipv4.diffserv = hdr.ipv4.diffserv;
        hdr.outer_ipv4.totalLen = hdr.ipv4.totalLen + 20;
        hdr.outer_ipv4.identification = 0;
        hdr.outer_ipv4.flags = 0;
        hdr.outer_ipv4.fragOffset = 0;
        hdr.outer_ipv4.ttl = 64;
        hdr.outer_ipv4.protocol = IP_PROTO_IPIP;
        hdr.outer_ipv4.srcAddr = local_ip;
        hdr.outer_ipv4.dstAddr = remote_ip;
        forward(dstAddr, port);
    }

    table routes {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { forward; encap; drop; }
        size = 256;
        default_action = drop();
    }

    // The packet's own header goes; the inner one takes its place.
    action decap() {
        hdr.ipv4 = hdr.inner_ipv4;
        hdr.inner_ipv4.setInvalid();
    }

    table local_endpoints {
        key = { hdr.ipv4.dstAddr : exact; }
        actions = { decap; NoAction; }
        size = 16;
        default_action = NoAction();
    }

    apply {
        if (!hdr.ipv4.isValid()) {
            drop();
        } else {
            if (hdr.inner_ipv4.isValid()) {
                local_endpoints.apply();
            }
            if (hdr.ipv4.ttl > 1) {
                hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
                routes.apply();
            } else {
                drop();
            }
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
            hdr.outer_ipv4.isValid(),
            { hdr.outer_ipv4.version, hdr.outer_ipv4.ihl, hdr.outer_ipv4.diffserv,
              hdr.outer_ipv4.totalLen, hdr.outer_ipv4.identification,
              hdr.outer_ipv4.flags, hdr.outer_ipv4.fragOffset, hdr.outer_ipv4.ttl,
              hdr.outer_ipv4.protocol, hdr.outer_ipv4.srcAddr, hdr.outer_ipv4.dstAddr },
            hdr.outer_ipv4.hdrChecksum,
            HashAlgorithm.csum16);
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
        packet.emit(hdr.outer_ipv4);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.inner_ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
