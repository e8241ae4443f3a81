"""Where one INC call spends its time: the spread of the workers' starts (skew after the
barrier), each worker's own call time, and the parts the agent itself times per call
(its `last_stats`, when it keeps them), as medians over calls; printed as a Markdown table.
"""
from __future__ import annotations

import numpy as np


# The agent's parts in the order a call spends them (hosts/agent.py CallStats); others follow.
CALL_ORDER = ("setup_s", "exponent_s", "send_s", "wait_s", "retransmit_s", "finish_s", "total_s", "retransmits",
              "srtt_s", "final_rto_s")


def call_time(replies: list[dict]) -> tuple[float, float]:
    """Seconds from the last rank's start to the last rank's end, and the spread of the starts.

    A collective is timed once every rank is in it: how far apart the ranks enter is the
    harness's doing (the barrier's release, 2 cores for N processes), not the algorithm's.
    MPI's rank 0 answers for all ranks (`ranks`)."""
    ranks = [t for r in replies for t in r.get("ranks", [r])]
    last_start = max(t["start"] for t in ranks)
    return max(t["end"] for t in ranks) - last_start, last_start - min(t["start"] for t in ranks)


def call_cpu(replies: list[dict]) -> float | None:
    """CPU seconds (user + system, every thread) that all ranks' processes spent in the call,
    summed over ranks; None if a rank did not measure it."""
    cpu = [t.get("cpu_s") for r in replies for t in r.get("ranks", [r])]
    return None if not cpu or any(c is None for c in cpu) else float(sum(cpu))


def call_budget(workers: int, nbytes: int, calls: list[list[dict]], probes: list[float] | None = None) -> dict:
    """`calls[c][w]` is worker w's reply to call c: start, end and optional per-call `stats`;
    `probes` one INC packet's round trips through the same switch (seconds), if measured."""
    total, skew = zip(*(call_time(c) for c in calls))
    own = [r["end"] - r["start"] for c in calls for r in c]
    parts: dict[str, list[float]] = {}
    for c in calls:
        for r in c:
            for name, value in numeric_stats(r).items():
                parts.setdefault(name, []).append(value)
    return {"workers": workers, "bytes": nbytes, "calls": len(calls),
            "call_s": float(np.median(total)), "call_p99_s": float(np.percentile(total, 99)),
            "start_skew_s": float(np.median(skew)),
            "from_first_start_s": float(np.median(np.add(total, skew))),
            "worker_call_s": float(np.median(own)),
            "parts": {name: float(np.median(v)) for name, v in parts.items()},
            **({"packet_rtt_s": float(np.median(probes)), "packet_rtt_p99_s": float(np.percentile(probes, 99)),
                "probes": len(probes)} if probes else {})}


def numeric_stats(reply: dict) -> dict[str, float]:
    """The numbers among a worker's per-call stats (times, counts); text and None left out."""
    return {name: float(value) for name, value in (reply.get("stats") or {}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


# Columns a budget may lack (one written before they were measured).
OPTIONAL_HEAD = {"from_first_start_s": "from the first start (us)", "packet_rtt_s": "packet RTT (us)",
                 "packet_rtt_p99_s": "RTT p99 (us)"}


def budget_table(budgets: list[dict]) -> str:
    """One row per worker count; times in microseconds; "call" runs from the last worker's
    start to the last end (`call_time`). Of the agent's parts, the times (`*_s`) and
    retransmissions; the JSON keeps every count."""
    shown = {name for b in budgets for name in b["parts"] if name.endswith("_s") or name == "retransmits"}
    parts = [p for p in CALL_ORDER if p in shown] + sorted(shown - set(CALL_ORDER))
    optional = [k for k in OPTIONAL_HEAD if any(k in b for b in budgets)]
    ratio = "packet_rtt_s" in optional
    head = ["N", "bytes", "calls", "call (us)", "p99 (us)", "start skew (us)", "per worker (us)",
            *(OPTIONAL_HEAD[k] for k in optional), *(["call / RTT"] if ratio else []),
            *(f"{p[:-2]} (us)" if p.endswith("_s") else p for p in parts)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b in budgets:
        cells = [str(b["workers"]), str(b["bytes"]), str(b["calls"]), *(
            f"{1e6 * b[k]:.0f}" for k in ("call_s", "call_p99_s", "start_skew_s", "worker_call_s"))]
        cells += [f"{1e6 * b[k]:.0f}" if k in b else "-" for k in optional]
        if ratio:
            cells.append(f"{b['call_s'] / b['packet_rtt_s']:.1f}" if "packet_rtt_s" in b else "-")
        cells += [_cell(name, b["parts"].get(name)) for name in parts]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _cell(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{1e6 * value:.0f}" if name.endswith("_s") else f"{value:g}"
