/* -*- P4_16 -*- */
// Port mirroring with an ingress-to-egress clone: frames from a mirrored port
// are forwarded as usual (with the switch's source MAC) and a copy goes to the
// clone session's port. The copy is the frame as received, before ingress
// changed it; egress prepends a mirror header saying which port it came from,
// a metadata field preserved with @field_list (its value at the end of
// ingress, as BMv2 copies it).
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_MIRROR = 0x88B9;
const bit<32> INSTANCE_TYPE_INGRESS_CLONE = 1;
const bit<8>  MIRROR_FIELDS = 1;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

const mac_t SWITCH_MAC = 0x00000000AB01;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header mirror_t {
    bit<16> orig_port;
    bit<16> etherType;
}

struct metadata {
    @field_list(MIRROR_FIELDS)
    bit<16> orig_port;
}

struct headers {
    mirror_t   mirror;
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
    action drop() {
        mark_to_drop(standard_metadata);
    }

    action forward(port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = SWITCH_MAC;
    }

    table dmac {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { forward; drop; }
        size = 64;
        default_action = drop();
    }

    action mirror(bit<32> session) {
        clone_preserving_field_list(CloneType.I2E, session, MIRROR_FIELDS);
    }

    table mirrored_ports {
        key = { standard_metadata.ingress_port : exact; }
        actions = { mirror; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    apply {
        mirrored_ports.apply();
        dmac.apply();
        // Set after the clone call: the clone still sees it.
        meta.orig_port = (bit<16>)standard_metadata.ingress_port;
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.instance_type == INSTANCE_TYPE_INGRESS_CLONE) {
            hdr.mirror.setValid();
            hdr.mirror.orig_port = meta.orig_port;
            hdr.mirror.etherType = ETHERTYPE_MIRROR;
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.mirror);
        packet.emit(hdr.ethernet);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
