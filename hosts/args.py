"""Argument types the project's command lines share (hosts.worker, controller, topologies.run,
bench, analysis, workloads.demo; p4sim checks its own, standing alone): ports and addresses
checked when the arguments are parsed, and output files whose folder is created and found
writable before any work starts. A bad value is argparse's usage error (exit 2), never a traceback
after minutes of work.
"""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Callable

from protocol import elements_per_packet_for, elements_per_packet_problem

MAX_PORT = 65535


def port(text: str) -> int:
    """A TCP or UDP port, 1..65535."""
    return _port(text, 1)


def listen_port(text: str) -> int:
    """A port to listen on, 0..65535 (0: the system picks a free one)."""
    return _port(text, 0)


def _port(text: str, lowest: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not lowest <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"port {value} is not in {lowest}..{MAX_PORT}")
    return value


def address(default_port: int | None = None, listen: bool = False) -> Callable[[str], tuple[str, int]]:
    """HOST:PORT (or HOST alone, if there is a default port) as (host, port); to `listen` on,
    port 0 lets the system pick."""
    def parse(text: str) -> tuple[str, int]:
        host, colon, number = text.rpartition(":")
        if not colon:
            host, number = text, ""
        if not host or (not number and default_port is None):
            raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT" if default_port is None
                                             else f"{text!r} is not HOST or HOST:PORT")
        return host, (listen_port if listen else port)(number) if number else default_port
    return parse


def host_port(text: str) -> str:
    """HOST:PORT, checked, as the text gRPC takes."""
    host, number = address()(text)
    return f"{host}:{number}"


def at_least(minimum: int) -> Callable[[str], int]:
    """A whole number no smaller than `minimum`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value
    return parse


def positive_float(text: str) -> float:
    """A finite number above 0 (not nan, not inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number, 0 or above (not nan, not inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or above, not {text}")
    return value


def unwritable(path: Path) -> str | None:
    """Why `path` cannot be written, or None; its folder is created, the file itself is not."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return f"cannot write {path}: {err.strerror or err}"
    if path.is_dir():
        return f"cannot write {path}: it is a folder"
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        return f"cannot write {path}: permission denied (or a read-only file system)"
    return None


def output_file(text: str) -> Path:
    """A file the command will write: its folder is created now, and it must be writable."""
    path = Path(text)
    if (why := unwritable(path)) is not None:
        raise argparse.ArgumentTypeError(why)
    return path


def output_dir(text: str) -> Path:
    """A folder the command will write into, created now."""
    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise argparse.ArgumentTypeError(f"cannot create {path}: {err.strerror or err}") from None
    return path


def settle_elements_per_packet(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Set args.elements_per_packet to the K the switch program is built with (the one asked
    for, else the target's recommended one), or end in argparse's error if links of args.mtu
    cannot carry it. For the CLIs that build a fabric (they all have --target and --mtu)."""
    args.elements_per_packet = elements_per_packet_for(args.target, args.mtu, args.elements_per_packet)
    if (problem := elements_per_packet_problem(args.elements_per_packet, args.mtu)):
        parser.error(f"--elements-per-packet: {problem}")
