/* -*- P4_16 -*- */
// Link monitoring with probes: a probe carries the egress port of every hop it
// will take; each switch counts the bytes it sent per port, and when a probe
// leaves it adds a record with the bytes since the previous probe and the two
// probes' timestamps, from which a host computes link utilisation. Mirrors the
// P4 tutorials' "link_monitor" exercise and its wire format (EtherType 0x812).
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4  = 0x0800;
const bit<16> ETHERTYPE_PROBE = 0x0812;

#define MAX_HOPS 10
#define MAX_PORTS 8

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;
typedef bit<48> time_t;

header ethernet_t {
    mac_t    dstAddr;
    mac_t    srcAddr;
    bit<16>  etherType;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      diffserv;
    bit<16>     totalLen;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     fragOffset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdrChecksum;
    ipv4_addr_t srcAddr;
    ipv4_addr_t dstAddr;
}

// How many switches the probe has passed.
header probe_t {
    bit<8> hop_cnt;
}

// One record per switch passed, newest first; bos marks the oldest.
header probe_data_t {
    bit<1>  bos;
    bit<7>  swid;
    bit<8>  port;
    bit<32> byte_cnt;
    time_t  last_time;
    time_t  cur_time;
}

// The egress port at each hop, in path order.
header probe_fwd_t {
    bit<8> egress_spec;
}

struct parser_metadata_t {
    bit<8> remaining;
}

struct metadata {
    bit<8>            egress_spec;
    parser_metadata_t parser_metadata;
}

struct headers {
    ethernet_t             ethernet;
    ipv4_t                 ipv4;
    probe_t                probe;
    probe_data_t[MAX_HOPS] probe_data;
    probe_fwd_t[MAX_HOPS]  probe_fwd;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_PROBE: parse_probe;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition accept;
    }

    // hop_cnt hops are behind the probe, so the port of this hop is the
    // (hop_cnt + 1)-th forwarding entry.
    state parse_probe {
        packet.extract(hdr.probe);
        meta.parser_metadata.remaining = hdr.probe.hop_cnt + 1;
        transition select(hdr.probe.hop_cnt) {
            0: parse_probe_fwd;
            default: parse_probe_data;
        }
    }

    state parse_probe_data {
        packet.extract(hdr.probe_data.next);
        transition select(hdr.probe_data.last.bos) {
            1: parse_probe_fwd;
            default: parse_probe_data;
        }
    }

    state parse_probe_fwd {
        packet.extract(hdr.probe_fwd.next);
        meta.parser_metadata.remaining = meta.parser_metadata.remaining - 1;
        meta.egress_spec = hdr.probe_fwd.last.egress_spec;
        transition select(meta.parser_metadata.remaining) {
            0: accept;
            default: parse_probe_fwd;
        }
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

    action ipv4_forward(mac_t dstAddr, port_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { ipv4_forward; drop; NoAction; }
        size = 1024;
        default_action = drop();
    }

    apply {
        if (standard_metadata.parser_error != error.NoError) {
            drop();
        } else if (hdr.ipv4.isValid()) {
            ipv4_lpm.apply();
        } else if (hdr.probe.isValid()) {
            standard_metadata.egress_spec = (port_t)meta.egress_spec;
            hdr.probe.hop_cnt = hdr.probe.hop_cnt + 1;
        } else {
            drop();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    // Bytes sent per port since the last probe left through it.
    register<bit<32>>(MAX_PORTS) byte_cnt_reg;
    // When the last probe left through each port.
    register<time_t>(MAX_PORTS) last_time_reg;

    action set_swid(bit<7> swid) {
        hdr.probe_data[0].swid = swid;
    }

    table swid {
        actions = { set_swid; NoAction; }
        default_action = NoAction();
    }

    apply {
        bit<32> port = (bit<32>)standard_metadata.egress_port;
        bit<32> byte_cnt;
        time_t last_time;
        time_t cur_time = standard_metadata.egress_global_timestamp;

        // Ports beyond the registers are not monitored.
        if (port < MAX_PORTS) {
            byte_cnt_reg.read(byte_cnt, port);
            byte_cnt = byte_cnt + standard_metadata.packet_length;
            // A probe closes the measurement interval of its port.
            byte_cnt_reg.write(port, hdr.probe.isValid() ? 32w0 : byte_cnt);

            if (hdr.probe.isValid()) {
                hdr.probe_data.push_front(1);
                hdr.probe_data[0].setValid();
                hdr.probe_data[0].bos = (hdr.probe.hop_cnt == 1) ? 1w1 : 1w0;
                swid.apply();
                hdr.probe_data[0].port = (bit<8>)standard_metadata.egress_port;
                hdr.probe_data[0].byte_cnt = byte_cnt;
                last_time_reg.read(last_time, port);
                last_time_reg.write(port, cur_time);
                hdr.probe_data[0].last_time = last_time;
                hdr.probe_data[0].cur_time = cur_time;
            }
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
              hdr.ipv4.totalLen, hdr.ipv4.identification,
              hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.probe);
        packet.emit(hdr.probe_data);
        packet.emit(hdr.probe_fwd);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
