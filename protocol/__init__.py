"""The INC protocol's numbers, in one place: the aggregator's address and ports, opcodes, flags,
collectives, reduce ops, the switch's slot pool and the sizes of a packet (docs/protocol.md).

`hosts` and `controller` both import them from here (neither may import the other), and
p4src/allreduce.p4 declares the same values as P4 constants; tests/test_protocol.py checks
that the program and this module agree.
"""
from __future__ import annotations

# The aggregator: workers send UDP to AGG_IP:INC_PORT; results come back from it to each
# worker's INC_PORT (unless the controller installed another port for a worker).
INC_PORT = 48879                 # 0xBEEF
RING_PORT = INC_PORT + 1         # the host ring baseline's host-to-host traffic, same format
AGG_IP = "10.0.0.254"
AGG_MAC = "02:00:00:00:00:fe"

INC_VERSION = 3                  # 3: data in the count's blocks of 32 (2: always K elements; 1: an 8-bit count)
POOL_SIZE = 512                  # slots per version in the switch, shared by all jobs
MAX_WORKERS = 32                 # the switch's contributor bitmap is 32 bits
JOB_LEAF = 0x80                  # added to set_job's num_workers on a leaf of a hierarchical job
UP_GROUP = 0x8000                # a leaf's group to its spine: the job's group | UP_GROUP

OP_CONTRIB = 1                   # worker -> switch: one worker's chunk
OP_RESULT = 2                    # switch -> worker: the chunk's result
OP_RING = 3                      # ring baseline: one chunk of a step, host to host
OP_RING_ACK = 4                  # ring baseline: the receiver has that chunk
OP_JOIN = 5                      # worker -> switch, header only: counted, adds nothing
OP_ACK = 6                       # switch -> worker, header only: the round is complete
OP_WINDOW_ACK = 7                # Reduce's root -> switch -> the others: which of its items have their
                                 # results, with each one's flags and need (one element per item)
WINDOW_ACK_ANSWERED = 1 << 16    # in a window ACK's element: this item's round is complete; bits 15-8
                                 # its result's flags, 7-0 its need (0: not said here)
OPCODES = {OP_CONTRIB: "contrib", OP_RESULT: "result", OP_RING: "ring", OP_RING_ACK: "ring-ack",
           OP_JOIN: "join", OP_ACK: "ack", OP_WINDOW_ACK: "window-ack"}
HEADER_ONLY = (OP_JOIN, OP_ACK)  # opcodes whose payload is the header alone

# How the switch combines a slot's contributions (the header's reduce_op).
REDUCE_SUM = 0
REDUCE_MIN = 1
REDUCE_MAX = 2
REDUCE_OPS = {REDUCE_SUM: "sum", REDUCE_MIN: "min", REDUCE_MAX: "max"}

# Who sends data and who gets it (the header's collective; its root names the worker).
COLL_ALLREDUCE = 0               # all send, all get the result
COLL_REDUCE = 1                  # all send, the root gets the result, the others an ACK
COLL_BROADCAST = 2               # the root sends, the others JOIN; all get the root's chunk
COLL_BARRIER = 3                 # all JOIN, all get an ACK
COLLECTIVES = {COLL_ALLREDUCE: "allreduce", COLL_REDUCE: "reduce", COLL_BROADCAST: "broadcast",
               COLL_BARRIER: "barrier"}

FLAG_OVERFLOW = 0x01             # some element did not fit, at a worker or in the switch's int32 add
FLAG_RESENT = 0x02               # a stored result sent again to one worker
FLAG_PARTIAL = 0x04              # between switches only: a leaf's partial sum, or a result for leaves
FLAG_RETRANSMIT = 0x08           # a contribution sent again; a result whose round had one
FLAG_EAGER = 0x10                # a Broadcast chunk the root's data completes alone; on a flat job's
                                 # Broadcast or Barrier result: the switch runs such rounds
FLAG_WINDOW_ACKS = 0x20          # a Reduce chunk whose root acknowledges it to the others in an
                                 # OP_WINDOW_ACK; on a flat job's Reduce result: the switch takes them
FLAG_ACK_NOW = 0x40              # the ring baseline's, host to host: a chunk that fills its sender's
                                 # window, so the receiver acknowledges it at once, not delayed

# Sizes. A packet is Ethernet / IPv4 (no options) / UDP / the INC header / int32 elements: its
# count's, in whole blocks of 32 (the last block ends in zeros), at most K. K, the elements per
# packet, is a build parameter of allreduce.p4 (INC_K, a multiple of 32) and so part of each job:
# the controller reads it from the pipeline it pushes and records it in the job.
HEADER_SIZE = 16                 # the INC header
ELEMENT_SIZE = 4                 # one int32 element
IPV4_UDP_SIZE = 20 + 8           # the part of a packet before the INC header that an MTU counts
ELEMENTS_PER_BLOCK = 32          # K is a multiple of it: the program carries elements in blocks
DEFAULT_ELEMENTS_PER_PACKET = 32  # allreduce.p4's INC_K when built without one (tests check)
# The K that `make run/demo/bench/demo-tp` and their CLIs build with when given none, per target:
# p4sim's C backend pays little per element next to its per-packet work, so the most a 1500-byte
# frame holds, 352, moves a large tensor in the fewest packets (docs/elements_per_packet.md);
# BMv2 interprets every element's actions one by one, so past 64 a doubling buys little.
RECOMMENDED_ELEMENTS_PER_PACKET = {"p4sim": 352, "bmv2": 64}
MAX_ELEMENTS_PER_PACKET = 4064   # the header's count has 12 bits


def data_elements(count: int, k: int) -> int:
    """The elements a packet with data carries for `count` in a job of K = `k`: the count's whole
    blocks (a switch's K is a multiple of a block; a host-only aggregator's need not be: at most K)."""
    return min(k, -(-count // ELEMENTS_PER_BLOCK) * ELEMENTS_PER_BLOCK)


def payload_size(elements_per_packet: int) -> int:
    """The UDP payload of an INC packet with K elements of data, the largest of a job."""
    return HEADER_SIZE + ELEMENT_SIZE * elements_per_packet


def max_elements_per_packet(mtu: int) -> int:
    """The largest K whose packets fit a link of this MTU (352 at 1500 bytes, 2208 at 9000)."""
    fits = (mtu - IPV4_UDP_SIZE - HEADER_SIZE) // ELEMENT_SIZE
    return min(MAX_ELEMENTS_PER_PACKET, fits // ELEMENTS_PER_BLOCK * ELEMENTS_PER_BLOCK)


def recommended_elements_per_packet() -> str:
    """The recommended K of each target, as a --help text says it."""
    return " and ".join(f"{k} on {'BMv2' if target == 'bmv2' else target}"
                        for target, k in RECOMMENDED_ELEMENTS_PER_PACKET.items())


def elements_per_packet_for(target: str, mtu: int, asked: int | None = None) -> int:
    """The K to build allreduce.p4 with: the one asked for, else the target's recommended K (at
    most what a frame of this MTU holds)."""
    if asked is not None:
        return asked
    return min(RECOMMENDED_ELEMENTS_PER_PACKET.get(target, DEFAULT_ELEMENTS_PER_PACKET),
               max(ELEMENTS_PER_BLOCK, max_elements_per_packet(mtu)))


def elements_per_packet_problem(elements_per_packet: int, mtu: int) -> str | None:
    """Why a switch program built with this K cannot run on links of this MTU, or None."""
    k = elements_per_packet
    if k % ELEMENTS_PER_BLOCK or not ELEMENTS_PER_BLOCK <= k <= MAX_ELEMENTS_PER_PACKET:
        return (f"{k} elements per packet: K must be a multiple of {ELEMENTS_PER_BLOCK} "
                f"from {ELEMENTS_PER_BLOCK} to {MAX_ELEMENTS_PER_PACKET}")
    if k > max_elements_per_packet(mtu):
        return (f"{k} elements per packet make {IPV4_UDP_SIZE + payload_size(k)}-byte IPv4 packets, more than "
                f"an MTU of {mtu} carries (at most K = {max_elements_per_packet(mtu)}; raise the MTU, "
                f"e.g. --mtu 9000)")
    return None
