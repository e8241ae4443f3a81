/* -*- P4_16 -*- */
// Enums and errors: a serializable enum (enum bit<8>) names the opcodes on the
// wire, a plain enum classifies packets in metadata, and a custom error from
// the parser's verify marks requests with opcode 0. PING is answered with PONG
// on the ingress port, RESET goes to the CPU port, anything else is dropped.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_CMD = 0x88BC;
const bit<9>  CPU_PORT = 64;

enum bit<8> Opcode {
    PING  = 1,
    PONG  = 2,
    RESET = 0xFF
}

enum PacketKind {
    REQUEST,
    CONTROL,
    OTHER
}

error { ZeroOpcode }

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header cmd_t {
    bit<8>  op;
    bit<8>  flags;
    bit<16> id;
}

struct metadata {
    PacketKind kind;
}

struct headers {
    ethernet_t ethernet;
    cmd_t      cmd;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_CMD: parse_cmd;
            default: accept;
        }
    }

    state parse_cmd {
        packet.extract(hdr.cmd);
        verify(hdr.cmd.op != 0, error.ZeroOpcode);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        meta.kind = PacketKind.OTHER;
        if (standard_metadata.parser_error == error.NoError && hdr.cmd.isValid()) {
            // A value that names no member casts to an unnamed Opcode value.
            Opcode op = (Opcode)hdr.cmd.op;
            if (op == Opcode.PING) {
                meta.kind = PacketKind.REQUEST;
            } else if (op == Opcode.RESET) {
                meta.kind = PacketKind.CONTROL;
            }
        }
        if (meta.kind == PacketKind.REQUEST) {
            hdr.cmd.op = (bit<8>)Opcode.PONG;
            standard_metadata.egress_spec = standard_metadata.ingress_port;
        } else if (meta.kind == PacketKind.CONTROL) {
            standard_metadata.egress_spec = CPU_PORT;
        } else {
            mark_to_drop(standard_metadata);
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
        packet.emit(hdr.cmd);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
