/* -*- P4_16 -*- */
// IPv4 or IPv6 in one header union: the parser extracts whichever member the
// EtherType names, so at most one is valid. Ingress decrements the TTL or the
// hop limit of the valid member and picks a port per IP version; the IPv4
// checksum is redone only when the IPv4 member is valid.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_IPV6 = 0x86DD;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

typedef bit<128> ipv6_addr_t;
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

header ipv6_t {
    bit<4>      version;
    bit<8>      trafficClass;
    bit<20>     flowLabel;
    bit<16>     payloadLen;
    bit<8>      nextHdr;
    bit<8>      hopLimit;
    ipv6_addr_t srcAddr;
    ipv6_addr_t dstAddr;
}

header_union l3_t {
    ipv4_t v4;
    ipv6_t v6;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    l3_t       l3;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_IPV6: parse_ipv6;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.l3.v4);
        transition accept;
    }

    state parse_ipv6 {
        packet.extract(hdr.l3.v6);
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

    apply {
        if (hdr.l3.v4.isValid() && hdr.l3.v4.ttl > 1) {
            hdr.l3.v4.ttl = hdr.l3.v4.ttl - 1;
            standard_metadata.egress_spec = 4;
        } else if (hdr.l3.v6.isValid() && hdr.l3.v6.hopLimit > 1) {
            hdr.l3.v6.hopLimit = hdr.l3.v6.hopLimit - 1;
            standard_metadata.egress_spec = 6;
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
    apply {
        update_checksum(
            hdr.l3.v4.isValid(),
            { hdr.l3.v4.version, hdr.l3.v4.ihl, hdr.l3.v4.diffserv,
              hdr.l3.v4.totalLen, hdr.l3.v4.identification,
              hdr.l3.v4.flags, hdr.l3.v4.fragOffset, hdr.l3.v4.ttl,
              hdr.l3.v4.protocol, hdr.l3.v4.srcAddr, hdr.l3.v4.dstAddr },
            hdr.l3.v4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.l3);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
