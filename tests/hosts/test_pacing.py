"""hosts/pacing.py alone: the RFC 6298 arithmetic of RtoEstimator (with its variance floor,
backoff and bounds) and the AIMD steps of CongestionWindow."""
from __future__ import annotations

import pytest

from hosts.pacing import CongestionWindow, RtoEstimator


def test_rto_follows_rfc6298_for_the_first_samples() -> None:
    est = RtoEstimator(initial=1.0, min_rto=0.001, max_rto=10.0, min_variance=0.0)
    assert est.rto == 1.0 and est.srtt is None
    est.sample(0.1)                      # SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR
    assert est.srtt == pytest.approx(0.1) and est.rttvar == pytest.approx(0.05)
    assert est.rto == pytest.approx(0.3)
    est.sample(0.2)                      # RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, then SRTT = 7/8 SRTT + 1/8 R
    assert est.rttvar == pytest.approx(0.0625) and est.srtt == pytest.approx(0.1125)
    assert est.rto == pytest.approx(0.1125 + 4 * 0.0625)


def test_steady_samples_keep_the_rto_above_one_and_a_half_round_trips() -> None:
    est = RtoEstimator(min_rto=0.001)
    for _ in range(200):
        est.sample(0.05)
    assert est.rttvar < 1e-6
    assert est.rto == pytest.approx(0.075)


def test_timers_expiring_together_double_the_rto_once_and_a_sample_ends_the_backoff() -> None:
    est = RtoEstimator(min_rto=0.001, max_rto=1.0)
    est.sample(0.04)
    rto = est.rto
    for _ in range(16):                  # sixteen packets sent with the same RTO all expire
        assert est.backoff(rto) == pytest.approx(2 * rto)
    assert est.backoff(2 * rto) == pytest.approx(4 * rto)
    for _ in range(10):
        est.backoff(est.rto)
    assert est.rto == 1.0                # max_rto
    est.sample(0.04)
    assert est.rto < 0.2


def test_rto_stays_within_its_bounds() -> None:
    est = RtoEstimator(initial=0.5, min_rto=0.02, max_rto=0.3)
    assert est.rto == 0.3
    est.sample(1e-5)
    assert est.rto == 0.02
    with pytest.raises(ValueError, match="min_rto"):
        RtoEstimator(min_rto=0.5, max_rto=0.1)


def test_window_halves_once_per_round_trip_of_losses_then_grows_one_packet_per_round_trip() -> None:
    w = CongestionWindow(16)
    assert w.allowed == 16
    w.on_loss(highest_sent=40)
    assert w.cwnd == 8
    w.on_loss(highest_sent=41)           # lost in the same round trip: no second cut
    w.on_ack(39)
    assert w.cwnd == 8 and w.losses == 1
    w.on_ack(40)                         # the answer to the last packet sent before the cut ends recovery
    assert 8 < w.cwnd < 8.2
    for seq in range(41, 49):
        w.on_ack(seq)
    assert w.allowed == 9                # ~ one more packet after a window's worth of answers
    for seq in range(49, 400):
        w.on_ack(seq)
    assert w.cwnd == 16                  # never above the job's window


def test_every_timeout_cuts_the_window_down_to_one_packet() -> None:
    w = CongestionWindow(16)
    for _ in range(6):
        w.on_timeout(highest_sent=10)
    assert w.allowed == 1 and w.losses == 6
    with pytest.raises(ValueError):
        CongestionWindow(0)


def test_a_window_with_a_floor_stops_there() -> None:
    w = CongestionWindow(16, minimum=4)
    for _ in range(6):
        w.on_timeout(highest_sent=10)
    assert w.allowed == 4 and w.losses == 6
    w.on_ack(11)
    assert w.allowed == 4 and 4 < w.cwnd < 4.3       # above ssthresh: one packet per round trip
    for bad in (0, 17):
        with pytest.raises(ValueError):
            CongestionWindow(16, minimum=bad)
