/* -*- P4_16 -*- */
// A VXLAN tunnel endpoint (RFC 7348). Frames from local hosts to a MAC behind
// a remote endpoint are encapsulated: outer Ethernet, IPv4, UDP to port 4789
// and a VXLAN header with the access port's VNI; the outer UDP source port is
// a hash of the inner frame's addresses so flows spread over the underlay.
// VXLAN packets addressed to this endpoint are decapsulated and the inner frame
// is bridged by (VNI, destination MAC).
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<16> VXLAN_PORT     = 4789;
const bit<8>  VXLAN_FLAG_VNI = 0x08;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

typedef bit<24> vni_t;
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

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

header vxlan_t {
    bit<8>  flags;
    bit<24> reserved;
    vni_t   vni;
    bit<8>  reserved2;
}

struct metadata {
    vni_t vni;
}

// The outer_* headers are only ever added by encapsulation; the others are
// what the parser finds (for a VXLAN packet, ethernet..vxlan are its outer
// headers and inner_ethernet the tunnelled frame).
struct headers {
    ethernet_t outer_ethernet;
    ipv4_t     outer_ipv4;
    udp_t      outer_udp;
    vxlan_t    outer_vxlan;
    ethernet_t ethernet;
    ipv4_t     ipv4;
    udp_t      udp;
    vxlan_t    vxlan;
    ethernet_t inner_ethernet;
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
            IP_PROTO_UDP: parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            VXLAN_PORT: parse_vxlan;
            default: accept;
        }
    }

    state parse_vxlan {
        packet.extract(hdr.vxlan);
        packet.extract(hdr.inner_ethernet);
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

    action set_vni(vni_t vni) {
        meta.vni = vni;
    }

    // Each access port belongs to one virtual network.
    table port_vni {
        key = { standard_metadata.ingress_port : exact; }
        actions = { set_vni; drop; }
        size = 64;
        default_action = drop();
    }

    action encap(ipv4_addr_t local_ip, ipv4_addr_t remote_ip, mac_t local_mac,
                 mac_t nexthop_mac, port_t port) {
        bit<16> frame_len = (bit<16>)standard_metadata.packet_length;
        bit<16> src_port;
        hash(src_port, HashAlgorithm.crc16, (bit<16>)49152,
             { hdr.ethernet.dstAddr, hdr.ethernet.srcAddr, hdr.ethernet.etherType },
             (bit<32>)16384);

        hdr.outer_ethernet.setValid();
        hdr.outer_ethernet.dstAddr = nexthop_mac;
        hdr.outer_ethernet.srcAddr = local_mac;
        hdr.outer_ethernet.etherType = ETHERTYPE_IPV4;

        hdr.outer_ipv4.setValid();
        hdr.outer_ipv4.version = 4;
        hdr.outer_ipv4.ihl = 5;
        hdr.outer_ipv4.diffserv = 0;
        hdr.outer_ipv4.totalLen = frame_len + 36;     // IPv4 20 + UDP 8 + VXLAN 8
        hdr.outer_ipv4.identification = 0;
        hdr.outer_ipv4.flags = 0;
        hdr.outer_ipv4.fragOffset = 0;
        hdr.outer_ipv4.ttl = 64;
        hdr.outer_ipv4.protocol = IP_PROTO_UDP;
        hdr.outer_ipv4.srcAddr = local_ip;
        hdr.outer_ipv4.dstAddr = remote_ip;

        hdr.outer_udp.setValid();
        hdr.outer_udp.srcPort = src_port;
        hdr.outer_udp.dstPort = VXLAN_PORT;
        hdr.outer_udp.length = frame_len + 16;
        hdr.outer_udp.checksum = 0;

        hdr.outer_vxlan.setValid();
        hdr.outer_vxlan.flags = VXLAN_FLAG_VNI;
        hdr.outer_vxlan.reserved = 0;
        hdr.outer_vxlan.vni = meta.vni;
        hdr.outer_vxlan.reserved2 = 0;

        standard_metadata.egress_spec = port;
    }

    action local_forward(port_t port) {
        standard_metadata.egress_spec = port;
    }

    // Where a (VNI, MAC) lives: behind a remote endpoint, or on a local port.
    table l2_vni {
        key = {
            meta.vni             : exact;
            hdr.ethernet.dstAddr : exact;
        }
        actions = { encap; local_forward; drop; }
        size = 1024;
        default_action = drop();
    }

    action decap() {
        meta.vni = hdr.vxlan.vni;
        hdr.ethernet.setInvalid();
        hdr.ipv4.setInvalid();
        hdr.udp.setInvalid();
        hdr.vxlan.setInvalid();
    }

    table inner_l2 {
        key = {
            meta.vni                   : exact;
            hdr.inner_ethernet.dstAddr : exact;
        }
        actions = { local_forward; drop; }
        size = 1024;
        default_action = drop();
    }

    // The addresses this endpoint terminates tunnels on.
    table local_vtep {
        key = { hdr.ipv4.dstAddr : exact; }
        actions = { decap; NoAction; }
        size = 16;
        default_action = NoAction();
    }

    apply {
        if (hdr.vxlan.isValid()) {
            // Tunnels to other endpoints are not ours to carry.
            if (local_vtep.apply().hit) {
                inner_l2.apply();
            } else {
                drop();
            }
        } else if (port_vni.apply().hit) {
            l2_vni.apply();
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
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.outer_ethernet);
        packet.emit(hdr.outer_ipv4);
        packet.emit(hdr.outer_udp);
        packet.emit(hdr.outer_vxlan);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.vxlan);
        packet.emit(hdr.inner_ethernet);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
