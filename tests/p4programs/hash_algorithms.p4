/* -*- P4_16 -*- */
// v1model's hash extern with each of BMv2's algorithms over the same two
// fields: crc16, crc32, csum16, xor16 and identity; then a bounded hash,
// base + crc16 % count, as a load balancer uses it. The results go back in the
// request header, out of the port it came in on.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_HASH = 0x88BD;
const bit<16> BUCKET_BASE  = 100;
const bit<16> BUCKET_COUNT = 50;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header hash_req_t {
    bit<32> a;
    bit<32> b;
    bit<16> crc16;
    bit<32> crc32;
    bit<16> csum16;
    bit<16> xor16;
    bit<32> identity;
    bit<16> bucket;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    hash_req_t req;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_HASH: parse_req;
            default: accept;
        }
    }

    state parse_req {
        packet.extract(hdr.req);
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
        if (hdr.req.isValid()) {
            hash(hdr.req.crc16, HashAlgorithm.crc16, (bit<16>)0,
                 { hdr.req.a, hdr.req.b }, (bit<32>)65536);
            hash(hdr.req.crc32, HashAlgorithm.crc32, (bit<32>)0,
                 { hdr.req.a, hdr.req.b }, (bit<64>)4294967296);
            hash(hdr.req.csum16, HashAlgorithm.csum16, (bit<16>)0,
                 { hdr.req.a, hdr.req.b }, (bit<32>)65536);
            hash(hdr.req.xor16, HashAlgorithm.xor16, (bit<16>)0,
                 { hdr.req.a, hdr.req.b }, (bit<32>)65536);
            hash(hdr.req.identity, HashAlgorithm.identity, (bit<32>)0,
                 { hdr.req.b }, (bit<64>)4294967296);
            hash(hdr.req.bucket, HashAlgorithm.crc16, BUCKET_BASE,
                 { hdr.req.a, hdr.req.b }, BUCKET_COUNT);
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
        packet.emit(hdr.req);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
