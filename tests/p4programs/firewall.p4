/* -*- P4_16 -*- */
// A stateful firewall: a TCP SYN from the inside records its connection in a
// bloom filter (two bit registers indexed by a CRC16 and a CRC32 hash of the
// 5-tuple); TCP from the outside passes only if both bits of its reversed
// 5-tuple are set. Mirrors the P4 tutorials' "firewall" exercise.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_TCP   = 6;

#define BLOOM_FILTER_ENTRIES 4096

// Which side of the firewall a packet comes from.
const bit<1> DIR_OUTBOUND = 0;
const bit<1> DIR_INBOUND  = 1;

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
    bit<1>  cwr;
    bit<1>  ece;
    bit<1>  urg;
    bit<1>  ack;
    bit<1>  psh;
    bit<1>  rst;
    bit<1>  syn;
    bit<1>  fin;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgentPtr;
}

struct metadata { }

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
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_TCP: parse_tcp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    register<bit<1>>(BLOOM_FILTER_ENTRIES) bloom_filter_1;
    register<bit<1>>(BLOOM_FILTER_ENTRIES) bloom_filter_2;
    bit<32> pos_1;
    bit<32> pos_2;
    bit<1>  seen_1;
    bit<1>  seen_2;
    bit<1>  direction;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    // Both directions of a connection must hash alike, so the caller passes the
    // inside host's address and port first.
    action compute_hashes(ipv4_addr_t inside_addr, ipv4_addr_t outside_addr,
                          bit<16> inside_port, bit<16> outside_port) {
        hash(pos_1, HashAlgorithm.crc16, (bit<32>)0,
             { inside_addr, outside_addr, inside_port, outside_port,
               hdr.ipv4.protocol },
             (bit<32>)BLOOM_FILTER_ENTRIES);
        hash(pos_2, HashAlgorithm.crc32, (bit<32>)0,
             { inside_addr, outside_addr, inside_port, outside_port,
               hdr.ipv4.protocol },
             (bit<32>)BLOOM_FILTER_ENTRIES);
    }

    action ipv4_forward(mac_t dstAddr, port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { ipv4_forward; drop; NoAction; }
        size = 1024;
        default_action = drop();
    }

    action set_direction(bit<1> dir) {
        direction = dir;
    }

    // The (ingress, egress) port pairs that cross the firewall, and in which
    // direction; traffic between other ports is not filtered.
    table check_ports {
        key = {
            standard_metadata.ingress_port : exact;
            standard_metadata.egress_spec  : exact;
        }
        actions = { set_direction; NoAction; }
        size = 1024;
        default_action = NoAction();
    }

    apply {
        if (hdr.ipv4.isValid()) {
            ipv4_lpm.apply();
            if (hdr.tcp.isValid()) {
                direction = DIR_OUTBOUND;
                if (check_ports.apply().hit) {
                    if (direction == DIR_OUTBOUND) {
                        compute_hashes(hdr.ipv4.srcAddr, hdr.ipv4.dstAddr,
                                       hdr.tcp.srcPort, hdr.tcp.dstPort);
                    } else {
                        compute_hashes(hdr.ipv4.dstAddr, hdr.ipv4.srcAddr,
                                       hdr.tcp.dstPort, hdr.tcp.srcPort);
                    }
                    if (direction == DIR_OUTBOUND) {
                        // A new connection from the inside opens the way back.
                        if (hdr.tcp.syn == 1) {
                            bloom_filter_1.write(pos_1, 1);
                            bloom_filter_2.write(pos_2, 1);
                        }
                    } else if (direction == DIR_INBOUND) {
                        bloom_filter_1.read(seen_1, pos_1);
                        bloom_filter_2.read(seen_2, pos_2);
                        if (seen_1 != 1 || seen_2 != 1) {
                            drop();
                        }
                    }
                }
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
        packet.emit(hdr.ipv4);
        packet.emit(hdr.tcp);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
