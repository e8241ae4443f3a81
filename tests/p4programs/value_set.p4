/* -*- P4_16 -*- */
// A parser value set: which EtherTypes carry a 4-byte service tag is decided
// by the controller at run time, not in the program. Frames whose EtherType is
// in the set have their tag parsed and go out of the port it names; others go
// out of port 1 untouched.
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

header svc_tag_t {
    bit<16> service;
    bit<16> port;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    svc_tag_t  svc_tag;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    value_set<bit<16>>(4) tagged_types;

    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            tagged_types: parse_svc_tag;
            default: accept;
        }
    }

    state parse_svc_tag {
        packet.extract(hdr.svc_tag);
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
        if (hdr.svc_tag.isValid()) {
            standard_metadata.egress_spec = (port_t)hdr.svc_tag.port;
        } else {
            standard_metadata.egress_spec = 1;
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
        packet.emit(hdr.svc_tag);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
