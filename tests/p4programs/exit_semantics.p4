/* -*- P4_16 -*- */
// `exit` ends the control it is executed in, even from inside an action:
// nothing after it in ingress runs, but the packet goes on to egress and is
// forwarded with the changes made so far. Egress may exit too; the packet
// still leaves. Each step writes one byte of a trace header so the test sees
// which steps ran.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_TRACE = 0x88BB;

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header trace_t {
    bit<8> cmd;
    bit<8> step1;
    bit<8> step2;
    bit<8> step3;
    bit<8> egress_step1;
    bit<8> egress_step2;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
    trace_t    trace;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_TRACE: parse_trace;
            default: accept;
        }
    }

    state parse_trace {
        packet.extract(hdr.trace);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action record_step2() {
        hdr.trace.step2 = 1;
    }

    // An exit inside an action ends the whole ingress control, not just the action.
    action record_step2_and_exit() {
        hdr.trace.step2 = 1;
        exit;
    }

    apply {
        if (!hdr.trace.isValid()) {
            mark_to_drop(standard_metadata);
            exit;
        }
        standard_metadata.egress_spec = 3;
        hdr.trace.step1 = 1;
        if (hdr.trace.cmd == 1) {
            exit;
        }
        if (hdr.trace.cmd == 2) {
            record_step2_and_exit();
        } else {
            record_step2();
        }
        hdr.trace.step3 = 1;
        // cmd 4: a drop followed by exit stays a drop. cmd 5: mark_to_drop only
        // sets egress_spec to 511, so the write below forwards the packet again.
        if (hdr.trace.cmd == 4) {
            mark_to_drop(standard_metadata);
            exit;
        } else if (hdr.trace.cmd == 5) {
            mark_to_drop(standard_metadata);
        }
        standard_metadata.egress_spec = 3;
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.trace.egress_step1 = 1;
        if (hdr.trace.cmd == 3) {
            exit;
        }
        hdr.trace.egress_step2 = 1;
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.trace);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
