/* -*- P4_16 -*- */
// A loop through the switch with recirculate: a frame carrying a loop header
// goes round `rounds` times. Each egress pass counts one round down in the
// header and recirculates the deparsed packet while rounds remain; each
// ingress pass counts itself in metadata kept across recirculation
// (@field_list) and writes the count into the header.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_LOOP = 0x88BA;
const bit<8>  RECIRCULATE_FIELDS = 1;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header loop_t {
    bit<8> rounds;
    bit<8> ingress_passes;
}

struct metadata {
    @field_list(RECIRCULATE_FIELDS)
    bit<8> passes;
}

struct headers {
    ethernet_t ethernet;
    loop_t     loop;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_LOOP: parse_loop;
            default: accept;
        }
    }

    state parse_loop {
        packet.extract(hdr.loop);
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
        if (hdr.loop.isValid()) {
            meta.passes = meta.passes + 1;
            hdr.loop.ingress_passes = meta.passes;
            standard_metadata.egress_spec = 2;
        } else {
            mark_to_drop(standard_metadata);
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        if (hdr.loop.rounds > 0) {
            hdr.loop.rounds = hdr.loop.rounds - 1;
            recirculate_preserving_field_list(RECIRCULATE_FIELDS);
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.loop);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
