/* -*- P4_16 -*- */
// A per-source policer: the `policed` table maps a source MAC to one cell of
// a packet meter (two rates, three colours). Green frames go out port 2,
// yellow ones out port 3, red ones are dropped. Sources not in the table are
// not policed and go out port 1.
#include <core.p4>
#include <v1model.p4>

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

const bit<2> COLOR_GREEN  = 0;
const bit<2> COLOR_YELLOW = 1;
const bit<2> COLOR_RED    = 2;

struct metadata {
    bit<2> color;
}

struct headers {
    ethernet_t ethernet;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    meter(16, MeterType.packets) source_meter;

    action police(bit<32> index) {
        source_meter.execute_meter(index, meta.color);
    }

    table policed {
        key = { hdr.ethernet.srcAddr : exact; }
        actions = { police; NoAction; }
        size = 16;
        default_action = NoAction();
    }

    apply {
        meta.color = COLOR_GREEN;
        standard_metadata.egress_spec = 1;
        if (policed.apply().hit) {
            if (meta.color == COLOR_GREEN) {
                standard_metadata.egress_spec = 2;
            } else if (meta.color == COLOR_YELLOW) {
                standard_metadata.egress_spec = 3;
            } else {
                mark_to_drop(standard_metadata);
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
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
