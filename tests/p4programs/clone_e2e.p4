/* -*- P4_16 -*- */
// Egress-to-egress clones for monitoring: egress rewrites the source MAC per
// output port, and for monitored ports clones the packet to a session. The
// clone carries the packet as the original's egress left it (new source MAC
// included), goes through egress again as an egress clone (instance_type 2),
// and gets a trailer with the original's output port, preserved in metadata.
#include <core.p4>
#include <v1model.p4>

const bit<32> INSTANCE_TYPE_EGRESS_CLONE = 2;
const bit<8>  MONITOR_FIELDS = 1;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header monitor_t {
    bit<16> orig_egress_port;
}

struct metadata {
    @field_list(MONITOR_FIELDS)
    bit<16> orig_egress_port;
}

struct headers {
    ethernet_t ethernet;
    monitor_t  monitor;
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
    apply {
        // The destination MAC's last byte names the output port.
        standard_metadata.egress_spec = (port_t)hdr.ethernet.dstAddr[7:0];
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    action set_src_mac(mac_t src) {
        hdr.ethernet.srcAddr = src;
    }

    table port_mac {
        key = { standard_metadata.egress_port : exact; }
        actions = { set_src_mac; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    action monitor(bit<32> session) {
        meta.orig_egress_port = (bit<16>)standard_metadata.egress_port;
        clone_preserving_field_list(CloneType.E2E, session, MONITOR_FIELDS);
    }

    table monitored {
        key = { standard_metadata.egress_port : exact; }
        actions = { monitor; NoAction; }
        size = 64;
        default_action = NoAction();
    }

    apply {
        if (standard_metadata.instance_type == INSTANCE_TYPE_EGRESS_CLONE) {
            hdr.monitor.setValid();
            hdr.monitor.orig_egress_port = meta.orig_egress_port;
        } else {
            port_mac.apply();
            monitored.apply();
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.monitor);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
