/* -*- P4_16 -*- */
// What the parser's errors leave for ingress in v1model: the parser stops at
// the first error, sets standard_metadata.parser_error, and ingress still runs
// (BMv2 does not drop). Here ingress sends each error to its own port so the
// error is visible: NoError 1, PacketTooShort 2, BadVersion 3 (a verify with a
// custom error), ZeroLength 4; anything else is dropped. The header that failed
// stays invalid and its bytes go out as payload.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_MSG = 0x88B8;

error { BadVersion, ZeroLength }

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header msg_t {
    bit<8>  version;
    bit<8>  length;
    bit<16> id;
}

header body_t {
    bit<32> word;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    msg_t      msg;
    body_t     body;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_MSG: parse_msg;
            default: accept;
        }
    }

    state parse_msg {
        packet.extract(hdr.msg);
        verify(hdr.msg.version == 1, error.BadVersion);
        verify(hdr.msg.length != 0, error.ZeroLength);
        packet.extract(hdr.body);
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
        if (standard_metadata.parser_error == error.NoError) {
            standard_metadata.egress_spec = 1;
        } else if (standard_metadata.parser_error == error.PacketTooShort) {
            standard_metadata.egress_spec = 2;
        } else if (standard_metadata.parser_error == error.BadVersion) {
            standard_metadata.egress_spec = 3;
        } else if (standard_metadata.parser_error == error.ZeroLength) {
            standard_metadata.egress_spec = 4;
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
        packet.emit(hdr.msg);
        packet.emit(hdr.body);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
