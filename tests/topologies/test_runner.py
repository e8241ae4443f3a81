"""The runner's and the compiler step's errors: one clear line, never a traceback. No root needed."""
from pathlib import Path

import pytest

from topologies import pieces, run
from topologies.pieces import PieceError, compile_program


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
