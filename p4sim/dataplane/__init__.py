"""The switch's data-plane ports: one raw AF_PACKET socket per `-i PORT@IFACE`, the packet loop
between them and the pipeline, BMv2-style per-port pcap files (IFACE_in/out.pcap), and an
optional slow target (SlowMode). Two loops behind one shape, as the backends are: `Dataplane`
(python.py, frame by frame under the GIL) and `CDataplane` (c.py and dataplane.c: batched, in C).
"""
from __future__ import annotations

from .c import CDataplane
from .ports import DataplaneError, parse_interface
from .python import Dataplane
from .slow import SLOW_PRESETS, SlowMode, SlowStats

__all__ = ["CDataplane", "Dataplane", "DataplaneError", "SLOW_PRESETS", "SlowMode", "SlowStats", "parse_interface"]
