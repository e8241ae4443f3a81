"""Timers and windows for the host transports, measured rather than fixed: a retransmission
timeout from the round trips a sender measures (RFC 6298) and an AIMD congestion window.
Neither sends anything; `hosts/agent.py` (and the ring baseline) feed them events.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RtoEstimator:
    """The retransmission timeout of RFC 6298, from round-trip samples.

    Call `sample(rtt)` only for packets sent exactly once (Karn's rule: the answer to a
    retransmitted packet may belong to either copy). `backoff(used)` after a timeout doubles
    the RTO, at least to twice the timeout that just expired, so many packets expiring
    together double it once; the backed-off RTO stays until the next valid sample.

    One change to the RFC: a sender here takes a sample per packet, many per round trip,
    which would shrink RTTVAR to nothing between bursts and make a short scheduling stall
    look like loss; so the variance term is at least `srtt * min_variance`.
    """
    initial: float = 1.0          # seconds, until the first sample (RFC 6298: 1 s)
    min_rto: float = 0.005
    max_rto: float = 2.0
    min_variance: float = 0.5     # RTO >= SRTT * (1 + min_variance)
    srtt: float | None = None
    rttvar: float = 0.0
    rto: float = field(init=False)
    samples: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.min_rto <= self.max_rto:
            raise ValueError(f"need 0 < min_rto <= max_rto, not {self.min_rto} and {self.max_rto}")
        if self.initial <= 0:
            raise ValueError(f"the initial RTO must be positive, not {self.initial}")
        self.rto = self._bounded(self.initial)

    def sample(self, rtt: float) -> None:
        """A measured round trip (seconds) of a packet sent once."""
        rtt = max(rtt, 0.0)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.samples += 1
        self.rto = self._bounded(self.srtt + max(4 * self.rttvar, self.min_variance * self.srtt))

    def backoff(self, used: float) -> float:
        """A timer of `used` seconds expired: the RTO for the retransmission (and from now on)."""
        self.rto = self._bounded(max(self.rto, 2 * used))
        return self.rto

    def _bounded(self, rto: float) -> float:
        return min(self.max_rto, max(self.min_rto, rto))


@dataclass
class CongestionWindow:
    """How many packets a sender may have in flight: AIMD with slow start (RFC 5681's shape).

    It starts at `limit` (the protocol's own window; nothing may exceed it) and only a loss
    makes it smaller, never below `minimum`: `on_loss` halves it, once per round trip of data
    (call it with the sequence number sent last; losses of packets sent before the cut do not
    cut again), and `on_timeout` halves it every time. Each clean answer (`on_ack`) grows it: by one packet
    below the slow-start threshold, by 1/cwnd above it, i.e. one packet per round trip.
    """
    limit: int
    decrease: float = 0.5
    minimum: float = 1.0
    cwnd: float = field(init=False)
    ssthresh: float = field(init=False)
    losses: int = 0
    _recover: int | None = field(default=None, repr=False)   # in recovery until this seq is answered

    def __post_init__(self) -> None:
        if self.limit < 1 or not 0 < self.decrease < 1 or not 1 <= self.minimum <= self.limit:
            raise ValueError(f"need limit >= 1, 0 < decrease < 1 and 1 <= minimum <= limit, not {self.limit}, "
                             f"{self.decrease} and {self.minimum}")
        self.cwnd = self.ssthresh = float(self.limit)

    @property
    def allowed(self) -> int:
        """Packets that may be in flight now, at least one."""
        return int(self.cwnd) if self.cwnd >= 1 else 1

    def on_ack(self, seq: int) -> None:
        """The answer to packet `seq` arrived (sent once or not: it left the network)."""
        if self._recover is not None:
            if seq < self._recover:
                return
            self._recover = None
        if self.cwnd < self.ssthresh:
            self.cwnd = min(self.limit, self.cwnd + 1)
        else:
            self.cwnd = min(self.limit, self.cwnd + 1 / self.cwnd)

    def on_loss(self, highest_sent: int) -> None:
        """A packet was lost (seen from later answers): cut once per round trip."""
        if self._recover is not None:
            return
        self._cut()
        self._recover = highest_sent

    def on_timeout(self, highest_sent: int) -> None:
        """Nothing came back for a whole RTO: cut, whatever the recovery state."""
        self._cut()
        self._recover = highest_sent

    def _cut(self) -> None:
        self.losses += 1
        self.ssthresh = max(self.minimum, self.cwnd * self.decrease)
        self.cwnd = self.ssthresh
