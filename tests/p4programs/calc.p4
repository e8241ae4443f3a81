/* -*- P4_16 -*- */
// A calculator over a custom header: the switch reads two operands and an
// operator, writes the result and returns the frame to its sender. The wire
// format is the P4 tutorials' "calc" protocol (EtherType 0x1234):
//   'P' '4' version op | operand_a (32) | operand_b (32) | result (32)
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_CALC = 0x1234;
const bit<8>  CALC_MAGIC_P   = 0x50;   // 'P'
const bit<8>  CALC_MAGIC_4   = 0x34;   // '4'
const bit<8>  CALC_VERSION   = 0x01;
const bit<8>  OP_ADD         = 0x2b;   // '+'
const bit<8>  OP_SUB         = 0x2d;   // '-'
const bit<8>  OP_AND         = 0x26;   // '&'
const bit<8>  OP_OR          = 0x7c;   // '|'
const bit<8>  OP_XOR         = 0x5e;   // '^'

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header calc_t {
    bit<8>  p;
    bit<8>  four;
    bit<8>  version;
    bit<8>  op;
    bit<32> operand_a;
    bit<32> operand_b;
    bit<32> result;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    calc_t     calc;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_CALC: check_calc;
            default: accept;
        }
    }

    // Peek at the magic and version before committing to the header: a frame
    // of another protocol that reuses the EtherType is left unparsed.
    state check_calc {
        transition select(packet.lookahead<calc_t>().p,
                          packet.lookahead<calc_t>().four,
                          packet.lookahead<calc_t>().version) {
            (CALC_MAGIC_P, CALC_MAGIC_4, CALC_VERSION): parse_calc;
            default: accept;
        }
    }

    state parse_calc {
        packet.extract(hdr.calc);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    // Answer on the port the request came in on, addressed back to its sender.
    action reply(bit<32> value) {
        bit<48> sender;
        hdr.calc.result = value;
        sender = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = sender;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
    }

    action do_add() { reply(hdr.calc.operand_a + hdr.calc.operand_b); }
    action do_sub() { reply(hdr.calc.operand_a - hdr.calc.operand_b); }
    action do_and() { reply(hdr.calc.operand_a & hdr.calc.operand_b); }
    action do_or()  { reply(hdr.calc.operand_a | hdr.calc.operand_b); }
    action do_xor() { reply(hdr.calc.operand_a ^ hdr.calc.operand_b); }

    action drop() {
        mark_to_drop(standard_metadata);
    }

    // The operators are part of the protocol, so the program fixes them.
    table calculate {
        key = { hdr.calc.op : exact; }
        actions = { do_add; do_sub; do_and; do_or; do_xor; drop; }
        const default_action = drop();
        const entries = {
            OP_ADD : do_add();
            OP_SUB : do_sub();
            OP_AND : do_and();
            OP_OR  : do_or();
            OP_XOR : do_xor();
        }
    }

    apply {
        if (hdr.calc.isValid()) {
            calculate.apply();
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
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.calc);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
