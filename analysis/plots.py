"""Plots of measured and modelled AllReduce completion times and INC speedups, and of the
other collectives against their ring baselines, as PNG."""
from __future__ import annotations

from pathlib import Path

import matplotlib
matplotlib.use("Agg")   # files only: no display on a switch host or in CI
import matplotlib.pyplot as plt
import numpy as np

from .model import Fabric, Model, predict

COLOURS = {"inc": "tab:blue", "ring": "tab:orange", "mpi": "tab:red", "tree": "tab:green"}
LABELS = {"inc": "INC", "ring": "ring", "mpi": "MPI_Allreduce", "tree": "tree"}
BASELINE_MARKERS = {"ring": "o", "mpi": "^"}


def _sizes(runs: list[dict]) -> np.ndarray:
    sizes = sorted({r["bytes"] for r in runs})
    return np.geomspace(sizes[0], sizes[-1], 60)


def _by(runs: list[dict], algorithm: str, workers: int) -> list[dict]:
    return sorted((r for r in runs if r["algorithm"] == algorithm and r["workers"] == workers),
                  key=lambda r: r["bytes"])


def completion_times(runs: list[dict], model: Model, out: Path) -> None:
    """Time vs message size per worker count: measured medians (bars: 25th percentile to
    p99) for INC, ring and MPI, and the model's line for each; below, where the bench
    measured it, the host CPU each call cost (all workers' user + system time, summed)."""
    workers = sorted({r["workers"] for r in runs})
    with_cpu = any("cpu_s" in r for r in runs)
    fig, axes = plt.subplots(2 if with_cpu else 1, len(workers), figsize=(5 * len(workers), 8 if with_cpu else 4),
                             squeeze=False)
    grid = _sizes(runs)
    if with_cpu:
        host_cpu(runs, axes[1], workers)
    for ax, n in zip(axes[0], workers):
        for alg in ("inc", "ring", "mpi"):
            pts = _by(runs, alg, n)
            if not pts:
                continue
            x = [r["bytes"] for r in pts]
            q = np.array([np.percentile(r["times_s"], [25, 50, 99]) for r in pts])
            ax.errorbar(x, q[:, 1], yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], fmt="o", capsize=2,
                        color=COLOURS[alg], label=f"{LABELS[alg]} measured")
            if alg in model.costs:
                ax.plot(grid, [model.predict(alg, n, s) for s in grid], "-", color=COLOURS[alg],
                        alpha=0.6, label=f"{LABELS[alg]} model")
        ax.set(xscale="log", yscale="log", title=f"N = {n} workers (median; bars 25th pct to p99)",
               xlabel="message size per worker (bytes)", ylabel="completion time (s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def host_cpu(runs: list[dict], axes: np.ndarray, workers: list[int]) -> None:
    """CPU seconds per call vs message size, one axis per worker count: medians, bars from the
    25th to the 75th percentile."""
    for ax, n in zip(axes, workers):
        for alg in ("inc", "ring", "mpi"):
            pts = [r for r in _by(runs, alg, n) if "cpu_s" in r]
            if not pts:
                continue
            q = np.array([np.percentile(r["cpu_s"], [25, 50, 75]) for r in pts])
            ax.errorbar([r["bytes"] for r in pts], q[:, 1], yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], fmt="s-",
                        capsize=2, color=COLOURS[alg], label=LABELS[alg])
        ax.set(xscale="log", yscale="log", title=f"N = {n}: host CPU per call, all workers (median)",
               xlabel="message size per worker (bytes)", ylabel="user + system CPU (s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")


def speedups(runs: list[dict], model: Model, out: Path) -> None:
    """Baseline time / INC time vs size: measured against ring and MPI, and the model's lines."""
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    grid = _sizes(runs)
    for i, n in enumerate(sorted({r["workers"] for r in runs})):
        inc = {r["bytes"]: np.median(r["times_s"]) for r in _by(runs, "inc", n)}
        colour = f"C{i}"
        for baseline, marker in BASELINE_MARKERS.items():
            other = {r["bytes"]: np.median(r["times_s"]) for r in _by(runs, baseline, n)}
            both = sorted(inc.keys() & other.keys())
            if both:
                ax.plot(both, [other[s] / inc[s] for s in both], marker, color=colour,
                        label=f"N={n} over {LABELS[baseline]}, measured")
            if baseline in model.costs and "inc" in model.costs:
                ax.plot(grid, [model.predict(baseline, n, s) / model.predict("inc", n, s) for s in grid],
                        "-" if baseline == "ring" else ":", color=colour, alpha=0.6,
                        label=f"N={n} over {LABELS[baseline]}, model")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", ylim=(0, None), xlabel="message size per worker (bytes)",
           ylabel="speedup of INC (baseline time / INC time)",
           title="In-network AllReduce vs host ring and MPI_Allreduce, same switch")
    ax.grid(True, which="both", alpha=0.3)
    # Below the axes: the points it would hide are the small-message ones that matter most.
    ax.legend(ncol=3, fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def fabric_speedups(fabric: Fabric, workers: list[int], sizes: np.ndarray, title: str, out: Path) -> None:
    """Predicted speedup of INC over ring and tree on a described fabric."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, n in enumerate(workers):
        inc = np.array([predict(fabric, "inc", n, s) for s in sizes])
        for alg, style in (("ring", "-"), ("tree", "--")):
            other = np.array([predict(fabric, alg, n, s) for s in sizes])
            ax.plot(sizes, other / inc, style, color=f"C{i}", label=f"N={n}: {alg} / INC")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="message size per worker (bytes)",
           ylabel="predicted speedup of INC", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def collective_times(runs: list[dict], out: Path) -> None:
    """bench.collectives' runs: one panel per collective, switch and ring medians (bars: 25th
    percentile to p99) vs buffer size; Barrier, which has no size, as two bars."""
    collectives = list(dict.fromkeys(r["collective"] for r in runs))
    fig, axes = plt.subplots(1, len(collectives), figsize=(4.2 * len(collectives), 4), squeeze=False)
    n = runs[0]["workers"]
    for ax, collective in zip(axes[0], collectives):
        for i, alg in enumerate(("inc", "ring")):
            pts = sorted((r for r in runs if r["collective"] == collective and r["algorithm"] == alg),
                         key=lambda r: r["bytes"])
            if not pts:
                continue
            q = np.array([np.percentile(r["times_s"], [25, 50, 99]) for r in pts])
            err = [q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]]
            label = "switch" if alg == "inc" else "ring baseline"
            if collective == "barrier":
                ax.bar([i], q[:, 1], yerr=err, capsize=3, color=COLOURS[alg], label=label)
            else:
                ax.errorbar([r["bytes"] for r in pts], q[:, 1], yerr=err, fmt="o-", capsize=2,
                            color=COLOURS[alg], label=label)
        if collective == "barrier":
            ax.set(xticks=[0, 1], xticklabels=["switch", "ring"], ylabel="time (s)")
        else:
            ax.set(xscale="log", yscale="log", xlabel="buffer size (bytes)", ylabel="time (s)")
        ax.set_title(f"{collective}, N = {n}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("Collectives in the switch vs host ring baselines (median; bars 25th pct to p99)")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
