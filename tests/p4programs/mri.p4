/* -*- P4_16 -*- */
// Multi-hop route inspection: an IPv4 option carries a stack of per-switch
// records; every switch on the path pushes its id and the queue depth it saw.
// Mirrors the P4 tutorials' "mri" exercise; unlike it, the header checksum
// here covers the options too, as RFC 791 requires.
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4  = 0x0800;
const bit<5>  IPV4_OPTION_MRI = 31;
const bit<4>  IPV4_MIN_IHL    = 5;

// An IPv4 header is at most 60 bytes: 20 fixed, the 2-byte option header,
// the 2-byte count and then 8 bytes per record leave room for 4 records.
#define MAX_HOPS 4

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;
typedef bit<32> switch_id_t;
typedef bit<32> qdepth_t;

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

header ipv4_option_t {
    bit<1> copyFlag;
    bit<2> optClass;
    bit<5> option;
    bit<8> optionLength;
}

header mri_t {
    bit<16> count;
}

header switch_record_t {
    switch_id_t swid;
    qdepth_t    qdepth;
}

struct parser_metadata_t {
    bit<16> remaining;
}

struct metadata {
    parser_metadata_t parser_metadata;
}

struct headers {
    ethernet_t                ethernet;
    ipv4_t                    ipv4;
    ipv4_option_t             ipv4_option;
    mri_t                     mri;
    switch_record_t[MAX_HOPS] records;
}

error { IPHeaderTooShort }

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.ihl >= IPV4_MIN_IHL, error.IPHeaderTooShort);
        transition select(hdr.ipv4.ihl) {
            IPV4_MIN_IHL: accept;
            default: parse_ipv4_option;
        }
    }

    // Only the MRI option is understood, and only as the first option.
    state parse_ipv4_option {
        packet.extract(hdr.ipv4_option);
        transition select(hdr.ipv4_option.option) {
            IPV4_OPTION_MRI: parse_mri;
            default: accept;
        }
    }

    state parse_mri {
        packet.extract(hdr.mri);
        meta.parser_metadata.remaining = hdr.mri.count;
        transition select(meta.parser_metadata.remaining) {
            0: accept;
            default: parse_record;
        }
    }

    // The count says how many records follow: no varbit needed.
    state parse_record {
        packet.extract(hdr.records.next);
        meta.parser_metadata.remaining = meta.parser_metadata.remaining - 1;
        transition select(meta.parser_metadata.remaining) {
            0: accept;
            default: parse_record;
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
        // A short IHL or more records than fit: not a packet we can trace.
        if (standard_metadata.parser_error != error.NoError) {
            drop();
        } else if (hdr.ipv4.isValid()) {
            ipv4_lpm.apply();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    // The controller sets this switch's id as the default action's argument.
    action add_record(switch_id_t swid) {
        hdr.mri.count = hdr.mri.count + 1;
        // A pushed element is invalid until setValid (P4_16, BMv2 >= 1.11).
        hdr.records.push_front(1);
        hdr.records[0].setValid();
        hdr.records[0].swid = swid;
        hdr.records[0].qdepth = (qdepth_t)standard_metadata.deq_qdepth;

        // One record is 8 bytes: two 32-bit words of header.
        hdr.ipv4.ihl = hdr.ipv4.ihl + 2;
        hdr.ipv4_option.optionLength = hdr.ipv4_option.optionLength + 8;
        hdr.ipv4.totalLen = hdr.ipv4.totalLen + 8;
    }

    table swtrace {
        actions = { add_record; NoAction; }
        default_action = NoAction();
    }

    apply {
        // A full trace travels on unchanged rather than overflow the IHL.
        if (hdr.mri.isValid() && hdr.mri.count < MAX_HOPS) {
            swtrace.apply();
        }
    }
}

// Fields of invalid headers add nothing to the sum (BMv2 skips them), so
// listing every record's fields covers exactly the options present.
control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
              hdr.ipv4.totalLen, hdr.ipv4.identification,
              hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr,
              hdr.ipv4_option.copyFlag, hdr.ipv4_option.optClass,
              hdr.ipv4_option.option, hdr.ipv4_option.optionLength,
              hdr.mri.count,
              hdr.records[0].swid, hdr.records[0].qdepth,
              hdr.records[1].swid, hdr.records[1].qdepth,
              hdr.records[2].swid, hdr.records[2].qdepth,
              hdr.records[3].swid, hdr.records[3].qdepth },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.ipv4_option);
        packet.emit(hdr.mri);
        packet.emit(hdr.records);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
