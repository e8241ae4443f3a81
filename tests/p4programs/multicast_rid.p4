/* -*- P4_16 -*- */
// VLAN flooding through multicast groups: a frame to an unknown MAC goes to
// its group, one replica per (port, rid) in the group, and each replica is
// tagged in egress with the VLAN its rid names. A port may appear under
// several rids (a trunk carrying several VLANs) and then gets one copy per VLAN;
// rid 0 means untagged.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_VLAN = 0x8100;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header vlan_t {
    bit<3>  pcp;
    bit<1>  dei;
    bit<12> vid;
    bit<16> etherType;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    vlan_t     vlan;
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
    action set_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    action flood(bit<16> group) {
        standard_metadata.mcast_grp = group;
    }

    table dmac {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { set_port; flood; }
        size = 64;
        default_action = flood(1);
    }

    apply {
        dmac.apply();
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.egress_rid != 0) {
            hdr.vlan.setValid();
            hdr.vlan.pcp = 0;
            hdr.vlan.dei = 0;
            hdr.vlan.vid = (bit<12>)standard_metadata.egress_rid;
            hdr.vlan.etherType = hdr.ethernet.etherType;
            hdr.ethernet.etherType = ETHERTYPE_VLAN;
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.vlan);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
