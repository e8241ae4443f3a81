/* -*- P4_16 -*- */
// Whole headers and structs assigned at once from list expressions: the
// switch answers a query by filling a new reply header with one assignment
// (which also makes it valid, as the spec says for a header assigned a list),
// and keeps the query's addresses in a metadata struct assigned the same way.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_QUERY = 0x88C1;
const bit<16> ETHERTYPE_REPLY = 0x88C2;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header query_t {
    bit<32> key;
}

header reply_t {
    bit<32> key;
    bit<16> port;
    bit<16> magic;
}

struct endpoints_t {
    mac_t requester;
    mac_t responder;
}

struct metadata {
    endpoints_t ends;
}

struct headers {
    ethernet_t ethernet;
    query_t    query;
    reply_t    reply;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_QUERY: parse_query;
            default: accept;
        }
    }

    state parse_query {
        packet.extract(hdr.query);
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
        if (hdr.query.isValid()) {
            meta.ends = { hdr.ethernet.srcAddr, hdr.ethernet.dstAddr };
            hdr.reply = { hdr.query.key, (bit<16>)standard_metadata.ingress_port, 16w0xCAFE };
            hdr.query.setInvalid();
            hdr.ethernet = { meta.ends.requester, meta.ends.responder, ETHERTYPE_REPLY };
            standard_metadata.egress_spec = standard_metadata.ingress_port;
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
        packet.emit(hdr.query);
        packet.emit(hdr.reply);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
