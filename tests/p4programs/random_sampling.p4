/* -*- P4_16 -*- */
// Random packet sampling: every frame is forwarded, and a frame whose random
// roll (0..255, v1model's random extern) falls below the sampling rate is also
// cloned to the monitor session. The controller sets the rate as the default
// action's argument of a keyless table: 0 samples nothing, 256 everything.
#include <core.p4>
#include <v1model.p4>

const bit<32> MONITOR_SESSION = 9;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

struct metadata {
    bit<9> rate;
    bit<8> roll;
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
    action set_rate(bit<9> rate) {
        meta.rate = rate;
    }

    table sampling {
        actions = { set_rate; }
        default_action = set_rate(0);
    }

    apply {
        standard_metadata.egress_spec = 2;
        sampling.apply();
        random(meta.roll, 8w0, 8w255);
        if ((bit<9>)meta.roll < meta.rate) {
            clone(CloneType.I2E, MONITOR_SESSION);
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
