/* -*- P4_16 -*- */
// An L2 switch that mirrors frames from unknown source MACs to a monitor port, tagged
// with the port they came in on. It declares its own PortId_t, MulticastGroup_t,
// CloneSessionId_t and Timestamp_t, as the P4 tutorials' flowcache solution declares
// PortId_t: p4c's v1model.p4 leaves these names free (PortId_t exists there only when a
// program defines V1MODEL_VERSION >= 20200408), so a program may take them.
#include <core.p4>
#include <v1model.p4>

typedef bit<9>  PortId_t;
typedef bit<16> MulticastGroup_t;
typedef bit<16> CloneSessionId_t;
typedef bit<48> Timestamp_t;
typedef bit<48> mac_t;

const CloneSessionId_t MONITOR_SESSION = 7;
const MulticastGroup_t FLOOD_GROUP = 1;
const bit<8>  FL_MONITOR = 1;
const bit<16> ETHERTYPE_MONITOR = 0x88B5;    // IEEE local experimental EtherType
const bit<32> INSTANCE_TYPE_INGRESS_CLONE = 1;

header ethernet_t {
    mac_t   dstAddr;
    mac_t   srcAddr;
    bit<16> etherType;
}

// Follows the Ethernet header of a mirrored copy: where the frame came in, and the
// EtherType it carried.
header monitor_t {
    bit<7>   pad;
    PortId_t ingress_port;
    bit<16>  etherType;
}

struct metadata {
    // Survives into the mirrored copy (@field_list 1 = FL_MONITOR).
    @field_list(1)
    PortId_t    ingress_port;
    Timestamp_t seen_at;
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
    counter(512, CounterType.packets) frames_in;

    action forward(PortId_t port) {
        standard_metadata.egress_spec = port;
    }

    action flood(MulticastGroup_t group) {
        standard_metadata.mcast_grp = group;
    }

    // Destination MACs the controller knows go to one port; the others flood.
    table dmac {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { forward; flood; }
        default_action = flood(FLOOD_GROUP);
        size = 256;
    }

    action known_source() { }

    action unknown_source() {
        meta.ingress_port = standard_metadata.ingress_port;
        clone_preserving_field_list(CloneType.I2E, (bit<32>)MONITOR_SESSION, FL_MONITOR);
    }

    // A source MAC the controller has not learnt yet is shown to the monitor.
    table smac {
        key = { hdr.ethernet.srcAddr : exact; }
        actions = { known_source; unknown_source; }
        default_action = unknown_source();
        size = 256;
    }

    apply {
        meta.seen_at = standard_metadata.ingress_global_timestamp;
        frames_in.count((bit<32>)standard_metadata.ingress_port);
        smac.apply();
        dmac.apply();
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.instance_type == INSTANCE_TYPE_INGRESS_CLONE) {
            hdr.monitor.setValid();
            hdr.monitor.pad = 0;
            hdr.monitor.ingress_port = meta.ingress_port;
            hdr.monitor.etherType = hdr.ethernet.etherType;
            hdr.ethernet.etherType = ETHERTYPE_MONITOR;
        } else if (standard_metadata.egress_port == standard_metadata.ingress_port) {
            // A flooded frame never goes back out of the port it came in on.
            mark_to_drop(standard_metadata);
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
