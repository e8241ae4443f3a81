/* -*- P4_16 -*- */
// A tunnel header between Ethernet and IPv4: the first switch encapsulates
// routed IPv4 traffic, transit switches forward on the tunnel's destination id
// alone, and the last switch strips the header again. Mirrors the P4
// tutorials' "basic_tunnel" exercise, with encapsulation and decapsulation.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4   = 0x0800;
const bit<16> ETHERTYPE_TUNNEL = 0x1212;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;
typedef bit<16> tunnel_id_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

// proto_id is the EtherType of what follows the tunnel header.
header tunnel_t {
    bit<16>     proto_id;
    tunnel_id_t dst_id;
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
    ethernet_t ethernet;
    tunnel_t   tunnel;
    ipv4_t     ipv4;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_TUNNEL: parse_tunnel;
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_tunnel {
        packet.extract(hdr.tunnel);
        transition select(hdr.tunnel.proto_id) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
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

    action ipv4_forward(mac_t dstAddr, port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    // Enter the tunnel: the tunnel table below then picks the port.
    action tunnel_encap(tunnel_id_t dst_id) {
        hdr.tunnel.setValid();
        hdr.tunnel.proto_id = hdr.ethernet.etherType;
        hdr.tunnel.dst_id = dst_id;
        hdr.ethernet.etherType = ETHERTYPE_TUNNEL;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { ipv4_forward; tunnel_encap; drop; NoAction; }
        size = 1024;
        default_action = drop();
    }

    action tunnel_forward(port_t port) {
        standard_metadata.egress_spec = port;
    }

    // Leave the tunnel towards the destination host.
    action tunnel_decap(mac_t dstAddr, port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ethernet.etherType = hdr.tunnel.proto_id;
        hdr.tunnel.setInvalid();
    }

    table tunnel_exact {
        key = { hdr.tunnel.dst_id : exact; }
        actions = { tunnel_forward; tunnel_decap; drop; }
        size = 1024;
        default_action = drop();
    }

    apply {
        if (hdr.ipv4.isValid() && !hdr.tunnel.isValid()) {
            ipv4_lpm.apply();
        }
        // Also true for a packet tunnel_encap has just encapsulated.
        if (hdr.tunnel.isValid()) {
            tunnel_exact.apply();
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
        packet.emit(hdr.tunnel);
        packet.emit(hdr.ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
