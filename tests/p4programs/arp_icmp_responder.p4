/* -*- P4_16 -*- */
// The switch answers for its own addresses: an ARP request for one of them
// gets an ARP reply with that address's MAC, and an ICMP echo request to one
// of them gets an echo reply (addresses swapped, ICMP checksum redone over
// the header and the echoed payload). Both go back out of the port they came
// in on. Everything else is dropped.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP  = 0x0806;
const bit<8>  IP_PROTO_ICMP  = 1;
const bit<16> ARP_REQUEST = 1;
const bit<16> ARP_REPLY   = 2;
const bit<8>  ICMP_ECHO_REPLY   = 0;
const bit<8>  ICMP_ECHO_REQUEST = 8;

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

header arp_t {
    bit<16>     hwType;
    bit<16>     protoType;
    bit<8>      hwAddrLen;
    bit<8>      protoAddrLen;
    bit<16>     opcode;
    mac_t       senderHwAddr;
    ipv4_addr_t senderProtoAddr;
    mac_t       targetHwAddr;
    ipv4_addr_t targetProtoAddr;
}

header icmp_t {
    bit<8>  type;
    bit<8>  code;
    bit<16> checksum;
    bit<16> identifier;
    bit<16> sequence;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    arp_t      arp;
    ipv4_t     ipv4;
    icmp_t     icmp;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_ARP: parse_arp;
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_arp {
        packet.extract(hdr.arp);
        transition accept;
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_ICMP: parse_icmp;
            default: accept;
        }
    }

    state parse_icmp {
        packet.extract(hdr.icmp);
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

    action arp_reply(mac_t my_mac) {
        hdr.arp.opcode = ARP_REPLY;
        hdr.arp.targetHwAddr = hdr.arp.senderHwAddr;
        ipv4_addr_t asked = hdr.arp.targetProtoAddr;
        hdr.arp.targetProtoAddr = hdr.arp.senderProtoAddr;
        hdr.arp.senderHwAddr = my_mac;
        hdr.arp.senderProtoAddr = asked;
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = my_mac;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
    }

    table arp_answers {
        key = { hdr.arp.targetProtoAddr : exact; }
        actions = { arp_reply; drop; }
        size = 64;
        default_action = drop();
    }

    action echo_reply(mac_t my_mac) {
        hdr.icmp.type = ICMP_ECHO_REPLY;
        ipv4_addr_t requester = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = requester;
        hdr.ipv4.ttl = 64;
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = my_mac;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
    }

    table icmp_answers {
        key = { hdr.ipv4.dstAddr : exact; }
        actions = { echo_reply; drop; }
        size = 64;
        default_action = drop();
    }

    apply {
        if (hdr.arp.isValid() && hdr.arp.opcode == ARP_REQUEST) {
            arp_answers.apply();
        } else if (hdr.icmp.isValid() && hdr.icmp.type == ICMP_ECHO_REQUEST) {
            icmp_answers.apply();
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
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
              hdr.ipv4.totalLen, hdr.ipv4.identification,
              hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
        update_checksum_with_payload(
            hdr.icmp.isValid(),
            { hdr.icmp.type, hdr.icmp.code, hdr.icmp.identifier, hdr.icmp.sequence },
            hdr.icmp.checksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.arp);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.icmp);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
