/* -*- P4_16 -*- */
// 802.1Q access and trunk ports: an untagged frame from an access port gets
// its port's VLAN tag (inserted after the MAC addresses, EtherTypes chained);
// a tagged frame for an access port loses its tag. The destination MAC and
// VLAN pick the output port and whether it is a trunk.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_VLAN = 0x8100;

typedef bit<12> vlan_id_t;
typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header vlan_t {
    bit<3>    pcp;
    bit<1>    dei;
    vlan_id_t vid;
    bit<16>   etherType;
}

struct metadata {
    vlan_id_t vid;
    bit<1>    tagged_out;
}

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
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_VLAN: parse_vlan;
            default: accept;
        }
    }

    state parse_vlan {
        packet.extract(hdr.vlan);
        meta.vid = hdr.vlan.vid;
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }

    action set_access_vlan(vlan_id_t vid) {
        meta.vid = vid;
    }

    // Untagged frames take the VLAN of the access port they arrive on.
    table access_vlan {
        key = { standard_metadata.ingress_port : exact; }
        actions = { set_access_vlan; drop; }
        size = 64;
        default_action = drop();
    }

    action add_tag() {
        hdr.vlan.setValid();
        hdr.vlan.pcp = 0;
        hdr.vlan.dei = 0;
        hdr.vlan.vid = meta.vid;
        hdr.vlan.etherType = hdr.ethernet.etherType;
        hdr.ethernet.etherType = ETHERTYPE_VLAN;
    }

    action remove_tag() {
        hdr.ethernet.etherType = hdr.vlan.etherType;
        hdr.vlan.setInvalid();
    }

    action to_trunk(port_t port) {
        standard_metadata.egress_spec = port;
        meta.tagged_out = 1;
    }

    action to_access(port_t port) {
        standard_metadata.egress_spec = port;
        meta.tagged_out = 0;
    }

    table dmac_vlan {
        key = {
            hdr.ethernet.dstAddr : exact;
            meta.vid             : exact;
        }
        actions = { to_trunk; to_access; drop; }
        size = 256;
        default_action = drop();
    }

    apply {
        if (!hdr.vlan.isValid()) {
            access_vlan.apply();
        }
        if (dmac_vlan.apply().hit) {
            if (meta.tagged_out == 1 && !hdr.vlan.isValid()) {
                add_tag();
            } else if (meta.tagged_out == 0 && hdr.vlan.isValid()) {
                remove_tag();
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
        packet.emit(hdr.vlan);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
