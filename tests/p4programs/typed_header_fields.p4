/* -*- P4_16 -*- */
// Header fields of types other than bit<W>: a signed int<16> offset, a bool
// flag and a serializable enum. The switch adds the signed offset to a
// 16-bit position with saturation, honours the bool, and answers by the enum.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_TYPED = 0x88C0;

enum bit<8> Mode {
    ADD   = 1,
    RESET = 2
}

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header typed_t {
    Mode    mode;
    bool    enabled;
    bit<7>  _pad;
    int<16> offset;
    int<16> position;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    typed_t    typed;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_TYPED: parse_typed;
            default: accept;
        }
    }

    state parse_typed {
        packet.extract(hdr.typed);
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
        if (!hdr.typed.isValid()) {
            mark_to_drop(standard_metadata);
        } else {
            if (hdr.typed.enabled) {
                if (hdr.typed.mode == Mode.ADD) {
                    hdr.typed.position = hdr.typed.position |+| hdr.typed.offset;
                } else if (hdr.typed.mode == Mode.RESET) {
                    hdr.typed.position = 0;
                }
            }
            standard_metadata.egress_spec = standard_metadata.ingress_port;
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
        packet.emit(hdr.typed);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
