/* -*- P4_16 -*- */
// In-band network telemetry in the style of INT: UDP datagrams to the INT
// port carry a shim header and a stack of per-hop records. Each transit
// switch pushes its record (switch id, ports, queue depth) on top while the
// shim allows more hops, and grows the IPv4 and UDP lengths to match. On a
// sink port the switch strips the shim and every record and restores the
// application's UDP port, so the receiver gets the original datagram.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<16> INT_UDP_PORT   = 5000;
#define MAX_HOPS 4

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

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

header int_shim_t {
    bit<8>  hop_count;
    bit<8>  max_hops;
    bit<16> orig_dport;
}

header int_record_t {
    bit<32> switch_id;
    bit<16> ingress_port;
    bit<16> egress_port;
    bit<32> qdepth;
}

struct metadata {
    bit<8> remaining;
}

struct headers {
    ethernet_t             ethernet;
    ipv4_t                 ipv4;
    udp_t                  udp;
    int_shim_t             int_shim;
    int_record_t[MAX_HOPS] records;
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
            INT_UDP_PORT: parse_int_shim;
            default: accept;
        }
    }

    state parse_int_shim {
        packet.extract(hdr.int_shim);
        meta.remaining = hdr.int_shim.hop_count;
        transition select(meta.remaining) {
            0: accept;
            default: parse_record;
        }
    }

    state parse_record {
        packet.extract(hdr.records.next);
        meta.remaining = meta.remaining - 1;
        transition select(meta.remaining) {
            0: accept;
            default: parse_record;
        }
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

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { ipv4_forward; drop; }
        size = 1024;
        default_action = drop();
    }

    apply {
        // More records than the stack holds: a parser error, and a drop.
        if (standard_metadata.parser_error != error.NoError || !hdr.ipv4.isValid()) {
            drop();
        } else {
            ipv4_lpm.apply();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    action add_record(bit<32> switch_id) {
        hdr.records.push_front(1);
        hdr.records[0].setValid();
        hdr.records[0].switch_id = switch_id;
        hdr.records[0].ingress_port = (bit<16>)standard_metadata.ingress_port;
        hdr.records[0].egress_port = (bit<16>)standard_metadata.egress_port;
        hdr.records[0].qdepth = (bit<32>)standard_metadata.deq_qdepth;
        hdr.int_shim.hop_count = hdr.int_shim.hop_count + 1;
        hdr.ipv4.totalLen = hdr.ipv4.totalLen + 12;
        hdr.udp.length = hdr.udp.length + 12;
        hdr.udp.checksum = 0;
    }

    // The controller sets this switch's id as the default action's argument.
    table int_transit {
        actions = { add_record; NoAction; }
        default_action = NoAction();
    }

    action strip_int() {
        bit<16> int_bytes = (bit<16>)hdr.int_shim.hop_count * 12 + 4;
        hdr.ipv4.totalLen = hdr.ipv4.totalLen - int_bytes;
        hdr.udp.length = hdr.udp.length - int_bytes;
        hdr.udp.dstPort = hdr.int_shim.orig_dport;
        hdr.udp.checksum = 0;
        hdr.int_shim.setInvalid();
        hdr.records.pop_front(MAX_HOPS);
    }

    table int_sink {
        key = { standard_metadata.egress_port : exact; }
        actions = { strip_int; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    apply {
        if (hdr.int_shim.isValid()) {
            if (hdr.int_shim.hop_count < hdr.int_shim.max_hops && hdr.int_shim.hop_count < MAX_HOPS) {
                int_transit.apply();
            }
            int_sink.apply();
        }
    }
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
        packet.emit(hdr.udp);
        packet.emit(hdr.int_shim);
        packet.emit(hdr.records);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
