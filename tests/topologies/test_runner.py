"""The runner's and the compiler step's errors: one clear line, never a traceback. No root needed."""
from pathlib import Path
from types import SimpleNamespace

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from topologies import pieces, run
from topologies.pieces import PieceError, compile_program
from topologies.spec import JobSpec, Topology, star


def test_runner_without_root_says_it_needs_root(monkeypatch, capsys):
    monkeypatch.setattr(run.os, "geteuid", lambda: 1000)
    assert run.main(["--hosts", "4", "--cli"]) == 2
    assert "error: Mininet needs root" in capsys.readouterr().err


def test_runner_rejects_a_star_it_cannot_build(monkeypatch, capsys):
    monkeypatch.setattr(run.os, "geteuid", lambda: 0)
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--hosts", "9", "--cli"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith("error: a star has 2 to 8 hosts, not 9\n")


def test_slow_is_only_for_p4sim(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--target", "bmv2", "--slow", "bmv2", "--demo"])
    assert exit_info.value.code == 2
    assert "--slow slows p4sim down to BMv2's figures; --target bmv2 runs at its own speed" in capsys.readouterr().err


def test_flat_is_only_for_a_leaf_spine_which_is_otherwise_summed_on_two_levels(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--flat", "--demo"])
    assert exit_info.value.code == 2
    assert "--flat chooses how a leaf-spine sums its job; a star has one switch" in capsys.readouterr().err
    parser = run.build_parser()
    assert run.build_topology(parser.parse_args(["--topo", "leaf-spine"])).jobs[0].hierarchical
    assert not run.build_topology(parser.parse_args(["--topo", "leaf-spine", "--flat"])).jobs[0].hierarchical


def test_p4sim_compile_writes_p4info_and_device_config(tmp_path):
    source = Path(__file__).parents[1] / "p4programs" / "ipv4_router.p4"
    assert compile_program("p4sim", source, tmp_path) == "ipv4_router"
    assert 'name: "MyIngress.ipv4_lpm"' in (tmp_path / "ipv4_router.p4info.txt").read_text()
    assert (tmp_path / "ipv4_router.json").read_bytes().startswith(b"{")


def test_bad_program_error_carries_the_compilers_location(tmp_path):
    source = tmp_path / "bad.p4"
    source.write_text("#include <core.p4>\ncontrol C() { apply { x = 1; } }\n")
    with pytest.raises(PieceError, match=r"compiling .*bad.p4 failed \(exit \d+\):.*bad.p4:2:"):
        compile_program("p4sim", source, tmp_path / "out")


def test_bmv2_without_p4c_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(pieces.shutil, "which", lambda name: None)
    with pytest.raises(PieceError, match="p4c is not installed.*TARGET=p4sim"):
        compile_program("bmv2", tmp_path / "x.p4", tmp_path)


def test_p4sim_compile_takes_the_elements_per_packet(tmp_path):
    assert compile_program("p4sim", pieces.DEFAULT_PROGRAM, tmp_path, elements_per_packet=64) == "allreduce"
    p4info = text_format.Parse((tmp_path / "allreduce.p4info.txt").read_text(), p4info_pb2.P4Info())
    sizes = {r.preamble.name: r.size for r in p4info.registers}
    assert (sizes["MyIngress.slot_seen"], sizes["MyIngress.slot_values"]) == (1024, 64 * 1024)
    with pytest.raises(PieceError, match="INC_K, the elements per packet, must be a multiple of 32"):
        compile_program("p4sim", pieces.DEFAULT_PROGRAM, tmp_path / "bad", elements_per_packet=48)


def test_a_k_that_does_not_fit_the_mtu_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--elements-per-packet", "512", "--demo"])
    assert exit_info.value.code == 2
    assert ("--elements-per-packet: 512 elements per packet make 2092-byte IPv4 packets, more than an MTU of "
            "1500 carries (at most K = 352; raise the MTU, e.g. --mtu 9000)") in capsys.readouterr().err
    args = run.build_parser().parse_args(["--mtu", "9000", "--elements-per-packet", "512"])
    assert run.build_topology(args).mtu == 9000


def test_workers_get_the_k_the_controller_recorded_for_their_job(tmp_path):
    path = tmp_path / "topology.json"
    topo = star(2)
    Topology(topo.hosts, topo.switches, topo.links, [JobSpec(1, ("h1", "h2"), elements_per_packet=96),
                                                     JobSpec(2, ("h1",))]).dump(path)
    assert pieces.job_elements_per_packet(path, 1) == 96
    with pytest.raises(PieceError, match="job 2 in .* records no elements per packet: the controller's setup"):
        pieces.job_elements_per_packet(path, 2)
    with pytest.raises(PieceError, match="has no job 3"):
        pieces.job_elements_per_packet(path, 3)


def test_a_worker_told_another_k_than_its_jobs_is_refused_before_any_starts(tmp_path):
    path = tmp_path / "topology.json"
    topo = star(2)
    job = JobSpec(1, ("h1", "h2"), elements_per_packet=256)
    Topology(topo.hosts, topo.switches, topo.links, [job]).dump(path)
    fabric = SimpleNamespace(options=SimpleNamespace(topology_path=path))     # nothing may be started on it
    with pytest.raises(PieceError, match="worker 0 of job 1 was to run with --elements-per-packet 32, but the "
                                         "switch program the controller installed the job on carries 256"):
        pieces.run_matrix(fabric, job, tmp_path / "work", 10, 0, worker_args=("--elements-per-packet", "32"))
