"""A stand-in for the switch on loopback UDP, for tests without root: it sums each chunk's
int32 contributions from a job's workers (wrapping, as the switch's registers do; a JOIN
adds zeros), or takes their signed minimum or maximum (the header's reduce_op), ORs the flags, takes the max need, and sends the result to every contributor
from its own address, or a header-only ACK where the collective says so (docs/protocol.md);
a packet for a finished chunk gets its answer again. No slots, no versions: chunks are
keyed by seq, which is enough for workers that follow the protocol.
"""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field, replace

import numpy as np

from hosts.inc import (COLL_BARRIER, COLL_REDUCE, INC_K, OP_ACK, OP_CONTRIB, OP_JOIN, OP_RESULT, REDUCE_MAX,
                       REDUCE_MIN, IncFormatError, IncHeader, data_elements, pack, pack_header, unpack)


@dataclass
class _Round:
    sums: np.ndarray
    flags: int = 0
    need: int = -128
    contributions: int = 0
    senders: dict[int, tuple[str, int]] = field(default_factory=dict)
    result: IncHeader | None = None


class LoopbackAggregator:
    """Serves one job of `num_workers` on 127.0.0.1 until closed; `address` is (ip, port)."""

    def __init__(self, job_id: int, num_workers: int, k: int = INC_K) -> None:
        self.job_id = job_id
        self.k = k                  # the job's elements per packet
        self.num_workers = num_workers
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.address = self.sock.getsockname()
        self.results = 0
        self.joins = 0          # header-only JOINs received: the switch's own collectives in use
        self._rounds: dict[int, _Round] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="loopback-aggregator", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, sender = self.sock.recvfrom(2048)
                header, elements = unpack(data, self.k)
            except (TimeoutError, IncFormatError):
                continue
            if header.opcode not in (OP_CONTRIB, OP_JOIN) or header.job_id != self.job_id:
                continue
            r = self._rounds.setdefault(header.seq, _Round(np.zeros(self.k, np.int32)))
            if r.result is not None:
                self.sock.sendto(self._answer(r, header.worker_id), sender)
                continue
            if header.worker_id in r.senders:
                continue
            r.senders[header.worker_id] = sender
            if header.opcode == OP_CONTRIB:
                # A packet carries its count's blocks; as on the switch, the rest count as zeros.
                n = len(elements)
                if header.reduce_op in (REDUCE_MIN, REDUCE_MAX) and r.contributions:
                    r.sums[:n] = (np.minimum if header.reduce_op == REDUCE_MIN else np.maximum)(r.sums[:n], elements)
                elif header.reduce_op in (REDUCE_MIN, REDUCE_MAX):
                    r.sums[:n] = elements
                else:
                    r.sums[:n] += elements
                r.contributions += 1
            else:
                self.joins += 1
            r.flags |= header.flags
            r.need = max(r.need, header.need)
            if len(r.senders) == self.num_workers:
                r.result = replace(header, opcode=OP_RESULT, flags=r.flags, need=r.need)
                self.results += 1
                for worker, address in r.senders.items():
                    self.sock.sendto(self._answer(r, worker), address)

    def _answer(self, r: _Round, worker: int) -> bytes:
        """The round's result for `worker`: the data, or an ACK (Reduce's non-roots, Barrier)."""
        header = replace(r.result, worker_id=worker)
        if header.collective == COLL_BARRIER or (header.collective == COLL_REDUCE and worker != header.root):
            return pack_header(replace(header, opcode=OP_ACK))
        return pack(header, r.sums[:data_elements(header.count, self.k)], self.k)
