"""The oracle for data-plane fuzzing: which counter of allreduce.p4 one frame must hit,
derived from docs/protocol.md's checks (in their order), not from the P4 code, so the
fuzz tests can account for every injected packet.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from hosts.inc import (AGG_IP, COLL_ALLREDUCE, COLL_BARRIER, COLL_BROADCAST, COLL_REDUCE, ELEMENTS_PER_BLOCK,
                       FLAG_EAGER, FLAG_PARTIAL, HEADER_SIZE, INC_K, INC_PORT, INC_VERSION, OP_ACK, OP_CONTRIB, OP_JOIN,
                       OP_WINDOW_ACK, POOL_SIZE, REDUCE_MAX, REDUCE_SUM)

FORWARDED = "forwarded"       # ordinary traffic the switch forwards unchanged
IN_SLOT = "in_slot"           # passed every check: contributions, duplicate, stale or resent
WINDOW_ACK = "window_ack"     # a root's window ACK: to the job's other workers, no slot, no counter
JOIN_IPV4_LEN = 20 + 8 + HEADER_SIZE
_AGG_IP = bytes(int(b) for b in AGG_IP.split("."))
_ARP_REQUEST = 1


@dataclass(frozen=True)
class Admitted:
    """What the controller installed: jobs (id -> (slot_base, num_slots)), workers
    (job, worker, ingress port) and the MACs `l2_forward` knows (broadcast included)."""
    jobs: dict[int, tuple[int, int]]
    workers: frozenset[tuple[int, int, int]]
    macs: frozenset[bytes]


def expected_counter(frame: bytes, port: int, admitted: Admitted) -> str:
    """The counter's short name (e.g. "malformed_drops"), or FORWARDED or IN_SLOT."""
    if len(frame) < 14:
        return "l2_miss_drops"          # no Ethernet header: nothing to forward on
    dst_mac, ethertype = frame[0:6], struct.unpack_from("!H", frame, 12)[0]
    if ethertype == 0x0806 and len(frame) >= 14 + 28:
        oper, tpa = struct.unpack_from("!H", frame, 20)[0], frame[38:42]
        if oper == _ARP_REQUEST and tpa == _AGG_IP:
            return "arp_replies"
    if ethertype != 0x0800 or len(frame) < 34 or frame[30:34] != _AGG_IP:
        return FORWARDED if dst_mac in admitted.macs else "l2_miss_drops"
    if not _whole_contribution(frame):
        return "malformed_drops"
    inc = frame[42:58]
    if inc[0] >> 4 != INC_VERSION:
        return "bad_version_drops"
    opcode, reduce_op, collective, root = inc[0] & 0x0F, inc[14], inc[15] >> 5, inc[15] & 0x1F
    count_version_slot = int.from_bytes(inc[5:8], "big")       # count 12 bits, version 1, slot 11
    window_ack = opcode == OP_WINDOW_ACK and collective == COLL_REDUCE and not inc[1] & FLAG_PARTIAL
    if (opcode not in (OP_CONTRIB, OP_JOIN) and not window_ack) or not 1 <= count_version_slot >> 12 <= INC_K \
            or reduce_op > REDUCE_MAX or collective > COLL_BARRIER:
        return "malformed_drops"
    job, worker, slot = struct.unpack_from("!H", inc, 2)[0], inc[4], count_version_slot & 0x7FF
    sends_data = collective in (COLL_ALLREDUCE, COLL_REDUCE) or (collective == COLL_BROADCAST and worker == root)
    if (not window_ack and sends_data != (opcode == OP_CONTRIB)) \
            or (collective >= COLL_BROADCAST and reduce_op != REDUCE_SUM):
        return "malformed_drops"
    if inc[1] & FLAG_EAGER and (inc[1] & FLAG_PARTIAL or collective != COLL_BROADCAST):
        return "malformed_drops"       # an eager round is a Broadcast's, on one level
    if job not in admitted.jobs:
        return "unknown_job_drops"
    if root >= len({w for j, w, _ in admitted.workers if j == job}):
        return "malformed_drops"
    if (job, worker, port) not in admitted.workers:
        return "spoofed_worker_drops"
    if window_ack:
        return WINDOW_ACK if worker == root else "malformed_drops"
    slot_base, num_slots = admitted.jobs[job]
    if slot >= num_slots or slot_base + slot >= POOL_SIZE:
        return "slot_range_drops"
    return IN_SLOT


def _whole_contribution(frame: bytes) -> bool:
    """IPv4 without options, good checksum, one unfragmented datagram to INC_PORT of exactly
    one contribution's length (its count's blocks of elements, at most K; a JOIN's: the INC
    header alone), and all of it present."""
    version_ihl, total_len, flags_frag, proto = frame[14], *struct.unpack_from("!HxxH", frame, 16), frame[23]
    if version_ihl != 0x45 or proto != 17 or len(frame) < 14 + JOIN_IPV4_LEN:
        return False
    opcode, count = frame[42] & 0x0F, int.from_bytes(frame[47:49], "big") >> 4
    blocks = -(-count // ELEMENTS_PER_BLOCK)
    if opcode not in (OP_JOIN, OP_ACK) and count > INC_K:
        return False                    # more blocks than the parser's stack holds
    ipv4_len = JOIN_IPV4_LEN + (0 if opcode == OP_JOIN else 4 * ELEMENTS_PER_BLOCK * blocks)
    if len(frame) < 14 + ipv4_len:
        return False
    if not _ipv4_checksum_ok(frame[14:34]):
        return False
    dport, udp_len = struct.unpack_from("!xxHH", frame, 34)
    more_fragments, offset = flags_frag & 0x2000, flags_frag & 0x1FFF
    return (dport == INC_PORT and total_len == ipv4_len and udp_len == ipv4_len - 20
            and not more_fragments and offset == 0)


def _ipv4_checksum_ok(header: bytes) -> bool:
    """As v1model's verify_checksum with csum16: the stored value equals the one's
    complement of the one's-complement sum of the other nine 16-bit words."""
    words = struct.unpack("!10H", header)
    total = sum(words) - words[5]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF) == words[5]
