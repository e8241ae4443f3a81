/* -*- P4_16 -*- */
// A two-pass lookup with resubmit: the first pass maps the destination MAC to
// a service id and resubmits the packet, keeping the id in metadata
// (@field_list); the second pass (instance_type 6) maps the id to a port. The
// resubmitted packet is parsed again from the bytes as received, so changes
// the first pass made to headers are gone.
#include <core.p4>
#include <v1model.p4>

const bit<32> INSTANCE_TYPE_RESUBMIT = 6;
const bit<8>  RESUBMIT_FIELDS = 1;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

struct metadata {
    @field_list(RESUBMIT_FIELDS)
    bit<16> service;
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
    action drop() {
        mark_to_drop(standard_metadata);
    }

    // Overwriting the source MAC here shows that the first pass's header
    // changes do not survive the resubmit.
    action set_service(bit<16> service) {
        meta.service = service;
        hdr.ethernet.srcAddr = 0;
        resubmit_preserving_field_list(RESUBMIT_FIELDS);
    }

    table services {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { set_service; drop; }
        size = 64;
        default_action = drop();
    }

    action set_port(port_t port) {
        standard_metadata.egress_spec = port;
    }

    table service_ports {
        key = { meta.service : exact; }
        actions = { set_port; drop; }
        size = 64;
        default_action = drop();
    }

    apply {
        if (standard_metadata.instance_type == INSTANCE_TYPE_RESUBMIT) {
            service_ports.apply();
        } else {
            services.apply();
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
