/* -*- P4_16 -*- */
// MAC learning with digests: a frame whose (source MAC, port) pair is not in
// the `learned` table sends the controller a digest with the MAC and the
// port; the frame itself is still forwarded by destination, or flooded to
// multicast group 1 if the destination is unknown.
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

struct mac_learn_digest_t {
    mac_t  srcAddr;
    port_t ingress_port;
}

struct metadata { }

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
    action learn() {
        digest<mac_learn_digest_t>(1, { hdr.ethernet.srcAddr, standard_metadata.ingress_port });
    }

    table learned {
        key = {
            hdr.ethernet.srcAddr           : exact;
            standard_metadata.ingress_port : exact;
        }
        actions = { learn; NoAction; }
        size = 1024;
        default_action = learn();
    }

    action forward(port_t port) {
        standard_metadata.egress_spec = port;
    }

    action flood() {
        standard_metadata.mcast_grp = 1;
    }

    table dmac {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { forward; flood; }
        size = 1024;
        default_action = flood();
    }

    apply {
        learned.apply();
        dmac.apply();
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
