"""The command lines the switch nodes start: simple_switch_grpc's flags, for p4sim and BMv2.
No root needed: these are built, not run.
"""
import sys
from pathlib import Path

import pytest

from topologies import switches
from topologies.switches import (BMv2Switch, P4SimSwitch, SwitchError, TargetArgs, bmv2_command,
                                 p4sim_command, switch_class)

ARGS = TargetArgs(ports=((1, "s1-eth1"), (2, "s1-eth2")), device_id=0, grpc_addr="127.0.0.1:50051",
                  thrift_port=9090, cpu_port=510)


def test_p4sim_gets_simple_switch_grpc_flags_and_no_pipeline(monkeypatch):
    monkeypatch.delenv("P4SIM_BACKEND", raising=False)
    assert p4sim_command(ARGS) == [
        sys.executable, "-m", "p4sim", "-i", "1@s1-eth1", "-i", "2@s1-eth2", "--device-id", "0",
        "--grpc-server-addr", "127.0.0.1:50051", "--cpu-port", "510", "--no-p4"]


def test_pcap_and_console_log_are_passed_when_asked(monkeypatch):
    monkeypatch.delenv("P4SIM_BACKEND", raising=False)
    args = TargetArgs(((3, "s2-eth3"),), 1, "127.0.0.1:50052", 9091, 510, Path("build/pcaps"), True)
    assert p4sim_command(args)[3:] == [
        "-i", "3@s2-eth3", "--device-id", "1", "--grpc-server-addr", "127.0.0.1:50052", "--cpu-port", "510",
        "--pcap", "build/pcaps", "--log-console", "--no-p4"]


def test_slow_preset_is_passed_to_p4sim_and_refused_for_bmv2(monkeypatch):
    slow = TargetArgs(ARGS.ports, 0, ARGS.grpc_addr, 9090, slow="bmv2-tenth")
    assert p4sim_command(slow)[-3:] == ["--slow", "bmv2-tenth", "--no-p4"]
    monkeypatch.setattr(switches.shutil, "which", lambda name: f"/usr/local/bin/{name}")
    with pytest.raises(SwitchError, match="p4sim's imitation of BMv2.*leave SLOW unset"):
        bmv2_command(slow)


def test_p4sim_backend_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("P4SIM_BACKEND", "python")
    assert p4sim_command(ARGS)[-3:] == ["--backend", "python", "--no-p4"]
    monkeypatch.setenv("P4SIM_BACKEND", "")
    assert "--backend" not in p4sim_command(ARGS)


def test_bmv2_puts_grpc_address_and_cpu_port_after_the_double_dash(monkeypatch):
    monkeypatch.setattr(switches.shutil, "which", lambda name: f"/usr/local/bin/{name}")
    assert bmv2_command(ARGS) == [
        "/usr/local/bin/simple_switch_grpc", "-i", "1@s1-eth1", "-i", "2@s1-eth2", "--device-id", "0",
        "--thrift-port", "9090", "--no-p4", "--", "--grpc-server-addr", "127.0.0.1:50051",
        "--cpu-port", "510"]


def test_bmv2_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(switches.shutil, "which", lambda name: None)
    with pytest.raises(SwitchError, match="simple_switch_grpc is not installed.*TARGET=p4sim"):
        bmv2_command(ARGS)


def test_target_names_choose_the_node_class():
    assert switch_class("p4sim") is P4SimSwitch
    assert switch_class("bmv2") is BMv2Switch
    with pytest.raises(SwitchError, match="unknown target 'tofino'; choose one of p4sim, bmv2"):
        switch_class("tofino")
