/* -*- P4_16 -*- */
// A layer-4 load balancer. TCP to a virtual IP and port is spread over a
// pool of backends by a CRC32 hash of the 5-tuple (the same flow always
// reaches the same backend); the destination is rewritten to the backend.
// Replies from a backend get the virtual IP back as their source. Both the
// IPv4 and the TCP checksum (pseudo-header, header and payload) are redone.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_TCP   = 6;

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

header tcp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<32> seqNo;
    bit<32> ackNo;
    bit<4>  dataOffset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgentPtr;
}

struct metadata {
    bit<16> member;
    bit<16> tcp_length;
}

struct headers {
    ethernet_t ethernet;
    ipv4_t     ipv4;
    tcp_t      tcp;
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
        verify(hdr.ipv4.ihl == 5, error.HeaderTooShort);
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_TCP: parse_tcp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.tcp_length = hdr.ipv4.totalLen - 20;
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

    // A pool is `count` consecutive member ids from `base`.
    action pick_member(bit<16> base, bit<32> count) {
        hash(meta.member, HashAlgorithm.crc32, base,
             { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4.protocol,
               hdr.tcp.srcPort, hdr.tcp.dstPort },
             count);
    }

    table vips {
        key = {
            hdr.ipv4.dstAddr : exact;
            hdr.tcp.dstPort  : exact;
        }
        actions = { pick_member; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    action to_backend(ipv4_addr_t addr, mac_t mac, port_t port) {
        hdr.ipv4.dstAddr = addr;
        hdr.ethernet.dstAddr = mac;
        standard_metadata.egress_spec = port;
    }

    table members {
        key = { meta.member : exact; }
        actions = { to_backend; drop; }
        size = 256;
        default_action = drop();
    }

    action from_backend(ipv4_addr_t vip, mac_t client_mac, port_t port) {
        hdr.ipv4.srcAddr = vip;
        hdr.ethernet.dstAddr = client_mac;
        standard_metadata.egress_spec = port;
    }

    table backends {
        key = {
            hdr.ipv4.srcAddr : exact;
            hdr.tcp.srcPort  : exact;
        }
        actions = { from_backend; drop; }
        size = 256;
        default_action = drop();
    }

    apply {
        if (!hdr.tcp.isValid()) {
            drop();
        } else if (vips.apply().hit) {
            members.apply();
        } else {
            backends.apply();
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
        update_checksum_with_payload(
            hdr.tcp.isValid(),
            { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, 8w0, hdr.ipv4.protocol,
              meta.tcp_length, hdr.tcp.srcPort, hdr.tcp.dstPort,
              hdr.tcp.seqNo, hdr.tcp.ackNo, hdr.tcp.dataOffset, hdr.tcp.res,
              hdr.tcp.flags, hdr.tcp.window, hdr.tcp.urgentPtr },
            hdr.tcp.checksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.tcp);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
