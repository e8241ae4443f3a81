/* -*- P4_16 -*- */
// A stateful TCP firewall that tracks connections in a register indexed by a
// CRC32 hash of the connection (inside address and port first, so both
// directions find the same cell). An inside SYN opens the cell (SYN_SENT),
// the outside SYN+ACK establishes it, and from then on outside packets pass;
// a FIN or RST from either side closes it. Outside packets that find no
// established connection are dropped.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_TCP   = 6;

#define CONN_CELLS 1024
const bit<8> TCP_FIN = 0x01;
const bit<8> TCP_SYN = 0x02;
const bit<8> TCP_RST = 0x04;
const bit<8> TCP_ACK = 0x10;

const bit<2> STATE_CLOSED      = 0;
const bit<2> STATE_SYN_SENT    = 1;
const bit<2> STATE_ESTABLISHED = 2;

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
    bit<32> cell;
    bit<2>  state;
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
    register<bit<2>>(CONN_CELLS) conn_state;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action set_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    // The inside network is on port 1, the outside on port 2.
    table routes {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { set_port; drop; }
        size = 64;
        default_action = drop();
    }

    action find_cell(ipv4_addr_t inside_addr, bit<16> inside_port,
                     ipv4_addr_t outside_addr, bit<16> outside_port) {
        hash(meta.cell, HashAlgorithm.crc32, (bit<32>)0,
             { inside_addr, inside_port, outside_addr, outside_port },
             (bit<32>)CONN_CELLS);
        conn_state.read(meta.state, meta.cell);
    }

    apply {
        if (!hdr.tcp.isValid()) {
            drop();
            exit;
        }
        routes.apply();
        bool from_inside = standard_metadata.ingress_port == 1;
        if (from_inside) {
            find_cell(hdr.ipv4.srcAddr, hdr.tcp.srcPort, hdr.ipv4.dstAddr, hdr.tcp.dstPort);
        } else {
            find_cell(hdr.ipv4.dstAddr, hdr.tcp.dstPort, hdr.ipv4.srcAddr, hdr.tcp.srcPort);
        }
        bit<2> next_state = meta.state;
        if ((hdr.tcp.flags & (TCP_FIN | TCP_RST)) != 0) {
            next_state = STATE_CLOSED;
        } else if (from_inside && hdr.tcp.flags == TCP_SYN) {
            next_state = STATE_SYN_SENT;
        } else if (!from_inside && meta.state == STATE_SYN_SENT
                   && hdr.tcp.flags == (TCP_SYN | TCP_ACK)) {
            next_state = STATE_ESTABLISHED;
        }
        // Outside packets pass only on an established connection, or as the
        // SYN+ACK that establishes it, or as the FIN/RST that ends one.
        if (!from_inside && next_state != STATE_ESTABLISHED && meta.state != STATE_ESTABLISHED) {
            drop();
        } else {
            conn_state.write(meta.cell, next_state);
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
        packet.emit(hdr.tcp);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
