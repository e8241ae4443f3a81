"""Every command line refuses bad arguments before doing anything: argparse's usage and then one
`PROG: error: ...` line, exit 2, no traceback (runtime failures: one `error: ...` line, exit 1).
Ports and addresses are checked when parsed; an output file's folder is created and the file
checked writable before any collective, benchmark or fabric runs. The commands run in this process
as a user who is not root, so one that let a bad argument through stops at "needs root" (and fails
its row) instead of building a fabric."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

import analysis.__main__ as analysis_cli
import bench.__main__ as bench_cli
import bench.collectives as collectives_cli
import controller.__main__ as controller_cli
import hosts.worker as worker_cli
import p4sim.__main__ as p4sim_cli
import topologies.run as run_cli
import workloads.demo as demo_cli
from hosts.args import output_file
from topologies.spec import leaf_spine

REPO = Path(__file__).resolve().parents[1]
WORKER = ["--job-id", "1", "--worker-id", "0", "--workers", "2", "--size", "4"]


@pytest.fixture(autouse=True)
def not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A file where an output's folder would go: unwritable even for root."""
    (tmp_path / "file").write_text("")
    return tmp_path / "file"


def run(main: Callable[[list[str]], int], argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def assert_usage_error(code: int, err: str, message: str) -> None:
    """Exit 2; argparse's usage, then exactly one error line, the last; no traceback."""
    lines = err.splitlines()
    assert code == 2 and lines and lines[0].startswith("usage: "), err
    assert [line for line in lines if ": error: " in line] == [lines[-1]], err
    assert lines[-1].startswith("python -m ") and message in lines[-1], err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--aggregator", "10.0.0.254:99999"], "argument --aggregator: port 99999 is not in 1..65535"),
    (["--aggregator", ":7000"], "argument --aggregator: ':7000' is not HOST or HOST:PORT"),
    (["--aggregator", "10.0.0.254:x"], "argument --aggregator: not a port number: 'x'"),
    (["--port", "80000"], "argument --port: port 80000 is not in 1..65535"),
    (["--port", "-1"], "argument --port: port -1 is not in 1..65535"),
    (["--workers", "0"], "--workers must be at least 1, not 0"),
    (["--size", "-3"], "--size must not be negative, not -3"),
    (["--root", "2"], "--root must be a worker 0..1, not 2"),
    (["--output", "BLOCKED/x.npy"], "argument --output: cannot write BLOCKED/x.npy: File exists"),
    (["--output", "TMP"], "argument --output: cannot write TMP: it is a folder"),
])
def test_hosts_worker_refuses_bad_arguments_before_any_collective(args, message, capsys, blocked, tmp_path):
    args = [a.replace("BLOCKED", str(blocked)).replace("TMP", str(tmp_path)) for a in args]
    message = message.replace("BLOCKED", str(blocked)).replace("TMP", str(tmp_path))
    argv = WORKER + args if args[0] != "--workers" else WORKER[:4] + args + WORKER[6:]
    assert_usage_error(*run(worker_cli.main, argv, capsys), message)


@pytest.mark.parametrize("args, message", [
    (["registers", "x", "--grpc-addr", "127.0.0.1:99999"], "argument --grpc-addr: port 99999 is not in 1..65535"),
    (["registers", "x", "--grpc-addr", "nohost"], "argument --grpc-addr: 'nohost' is not HOST:PORT"),
    (["registers", "x", "--thrift-port", "0"], "argument --thrift-port: port 0 is not in 1..65535"),
    (["counters", "--device-id", "-1"], "argument --device-id: must be at least 0, not -1"),
    (["counters", "--election-id", "0"], "argument --election-id: must be at least 1, not 0"),
    (["registers", "x", "--index", "-3"], "argument --index: must be at least 0, not -3"),
    (["clear-slots", "-1"], "argument job_id: must be at least 0, not -1"),
    (["pool", "--listen", "127.0.0.1:70000"], "argument --listen: port 70000 is not in 0..65535"),
    (["watch", "--poll", "0"], "argument --poll: must be more than 0 seconds"),
    (["counters", "--target", "tofino"], "argument --target: invalid choice: 'tofino'"),
])
def test_controller_refuses_bad_arguments(args, message, capsys):
    assert_usage_error(*run(controller_cli.main, args, capsys), message)


@pytest.mark.parametrize("switches, message", [
    (0, "has no switches"),
    (3, "has several switches: choose one with --switch (s1, s2, s3)"),
])
def test_controller_says_how_many_switches_a_topology_has_when_it_needs_one(switches, message, capsys, tmp_path):
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(leaf_spine(2, 1, 1).to_dict() if switches else {}))
    code, err = run(controller_cli.main, ["counters", "--topo", str(path)], capsys)
    assert code == 1 and err == f"error: {path} {message}\n"


@pytest.mark.parametrize("args, message", [
    (["--hosts", "99"], "a star has 2 to 8 hosts, not 99"),
    (["--loss", "150"], "loss must be a percentage in [0, 100), not 150.0"),
    (["--topo", "leaf-spine", "--leaves", "0"], "a leaf-spine needs 1..250 leaves"),
    (["--demo", "--demo-bytes", "2"], "argument --demo-bytes: must be at least 4, not 2"),
    (["--build-dir", "BLOCKED/build"], "argument --build-dir: cannot create BLOCKED/build: Not a directory"),
    (["--flat"], "--flat chooses how a leaf-spine sums its job"),
    (["--slow", "bmv2", "--target", "bmv2"], "--slow slows p4sim down to BMv2's figures"),
])
def test_topologies_run_refuses_bad_arguments_before_any_fabric(args, message, capsys, blocked):
    args = [a.replace("BLOCKED", str(blocked)) for a in args]
    assert_usage_error(*run(run_cli.main, args, capsys), message.replace("BLOCKED", str(blocked)))


@pytest.mark.parametrize("main, args, message", [
    (bench_cli.main, ["--workers", "9"], "--workers must be 2..8"),
    (bench_cli.main, ["--timeout", "nan"], "--timeout and --trial-timeout positive"),
    (bench_cli.main, ["--trial-timeout", "inf"], "--timeout and --trial-timeout positive"),
    (bench_cli.main, ["--window", "0"], "--window must be 1..2047"),
    (bench_cli.main, ["-o", "BLOCKED/bench.json"], "cannot write BLOCKED/bench.json: File exists"),
    (collectives_cli.main, ["--timeout", "-1"], "--timeout and --trial-timeout positive"),
    (collectives_cli.main, ["--workers", "1"], "--workers must be 2..8"),
    (collectives_cli.main, ["-o", "BLOCKED/c.json"], "cannot write BLOCKED/c.json: File exists"),
], ids=lambda v: getattr(v, "__module__", None) or str(v))
def test_bench_clis_refuse_bad_arguments_before_any_trial(main, args, message, capsys, blocked):
    args = [a.replace("BLOCKED", str(blocked)) for a in args]
    assert_usage_error(*run(main, args, capsys), message.replace("BLOCKED", str(blocked)))


def test_an_output_folder_is_created_before_the_run_and_the_file_is_not(capsys, tmp_path):
    out = tmp_path / "new" / "dir" / "bench.json"
    # Every check passes up to the last one, root: the folder exists by then, the file does not.
    assert_usage_error(*run(bench_cli.main, ["--algorithms", "inc", "ring", "-o", str(out)], capsys),
                       "Mininet needs root")
    assert out.parent.is_dir() and not out.exists()
    assert output_file(str(tmp_path / "a" / "b.npy")) == tmp_path / "a" / "b.npy"
    assert (tmp_path / "a").is_dir() and not (tmp_path / "a" / "b.npy").exists()


@pytest.fixture(scope="module")
def measured() -> dict:
    return json.loads((REPO / "docs" / "results" / "bench.json").read_text())


def edited(bench: dict, path: Path, keep: Callable[[dict], bool] = lambda r: True, time: float | None = None) -> Path:
    runs = [json.loads(json.dumps(r)) for r in bench["runs"] if keep(r)]
    if time is not None:
        runs[3]["times_s"][0] = time
    path.write_text(json.dumps({**bench, "runs": runs}))
    return path


@pytest.mark.parametrize("case, message", [
    ("no-inc", "no INC runs: nothing to model or compare"),
    ("inc-only", "no ring or mpi runs to compare INC with"),
    ("negative", "has a time of -0.001 s: times must be finite and positive"),
    ("nan", "has a time of nan s: times must be finite and positive"),
    ("infinite", "has a time of inf s: times must be finite and positive"),
    ("zero", "has a time of 0.0 s: times must be finite and positive"),
])
def test_analysis_refuses_a_bench_it_cannot_model_and_writes_nothing(case, message, measured, capsys, tmp_path):
    path = tmp_path / "bench.json"
    if case == "no-inc":
        edited(measured, path, lambda r: r["algorithm"] != "inc")
    elif case == "inc-only":
        edited(measured, path, lambda r: r["algorithm"] == "inc")
    else:
        edited(measured, path, time={"negative": -0.001, "nan": float("nan"), "infinite": float("inf"),
                                     "zero": 0.0}[case])
    assert_usage_error(*run(analysis_cli.main, [str(path), "-o", str(tmp_path / "out")], capsys), message)
    assert not (tmp_path / "out" / "model.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--no-p4", "--thrift-port", "99999"], "argument --thrift-port: port 99999 is not in 0..65535"),
    (["--no-p4", "--grpc-server-addr", "127.0.0.1:99999"], "argument --grpc-server-addr: port 99999 is not in"),
    (["--no-p4", "--grpc-server-addr", "nohost"], "argument --grpc-server-addr: 'nohost' is not HOST:PORT"),
    (["--no-p4", "-i", "511@lo"], "-i: switch port 511 is not in 0..510"),
    (["--no-p4", "--cpu-port", "-1"], "argument --cpu-port: switch port -1 is not in 0..510"),
    (["--no-p4", "--", "--cpu-port", "600"], "argument --cpu-port: switch port 600 is not in 0..510"),
    (["--no-p4", "--device-id", "-1"], "argument --device-id: value -1 is not in 0..18446744073709551615"),
    (["--no-p4", "-i", "lo"], "-i: expected PORT@IFACE"),
])
def test_p4sim_refuses_bad_arguments_before_serving(args, message, capsys):
    assert_usage_error(*run(p4sim_cli.main, args, capsys), message)


@pytest.mark.parametrize("args, message", [
    (["-o", "BLOCKED/tp.json"], "cannot write BLOCKED/tp.json: File exists"),
    (["--retransmit-ms", "nan"], "--retransmit-ms and --run-timeout must be positive"),
    (["--run-timeout", "0"], "--retransmit-ms and --run-timeout must be positive"),
    (["--workers", "3"], "world size 3 must divide the model's 8 weight blocks"),
    (["--tokens", "0"], "--reps, --tokens and --prompt-length must be at least 1"),
])
def test_workloads_demo_refuses_bad_arguments_before_any_fabric(args, message, capsys, blocked, tmp_path):
    args = [a.replace("BLOCKED", str(blocked)) for a in args]
    argv = args if "-o" in args else [*args, "-o", str(tmp_path / "tp.json")]
    assert_usage_error(*run(demo_cli.main, argv, capsys), message.replace("BLOCKED", str(blocked)))


@pytest.mark.parametrize("module, args", [
    ("hosts.worker", [*WORKER, "--port", "80000"]),
    ("controller", ["registers", "x", "--thrift-port", "99999"]),
    ("topologies.run", ["--hosts", "99"]),
    ("bench", ["--timeout", "nan"]),
    ("bench.collectives", ["--window", "0"]),
    ("analysis", ["/nonexistent/bench.json"]),
    ("p4sim", ["--no-p4", "--thrift-port", "99999"]),
    ("workloads.demo", ["--tokens", "0"]),
])
def test_each_cli_as_a_process_ends_a_bad_argument_in_usage_and_one_error_line(module, args):
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=os.environ | {"TARGET": "p4sim"})
    prog = f"python -m {module}" + (" registers" if module == "controller" else "")
    assert_usage_error(done.returncode, done.stderr, f"{prog}: error: ")
