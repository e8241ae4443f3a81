"""Shared fixtures for p4sim's tests: the conformance programs in tests/p4programs,
compiled once per session, a fresh in-process Switch per test, and the backend it runs on.

The modules in BOTH_BACKENDS run each test once per backend of `--p4sim-backend` (default
both): `Switch(...)` then builds that backend's switch ($P4SIM_BACKEND), and a test on the C
backend fails if the program fell back to Python, so it cannot pass vacuously. A test there
about the Python backend alone is marked `python_backend`; the other modules run on Python.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

if TYPE_CHECKING:
    from p4sim import Program, Switch

PROGRAMS_DIR = Path(__file__).resolve().parent.parent / "p4programs"
BOTH_BACKENDS = ("test_programs", "test_corpus_", "test_bmv2_traces", "test_pipeline", "test_compiler_",
                 "test_language.", "test_expression_oracle", "test_externs", "test_action_profiles", "test_server", "test_thrift")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "python_backend: about the Python backend alone (tracing, its code)")
    config.addinivalue_line("markers", "c_fallback: makes the C backend fall back to Python on purpose")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "p4sim_backend" not in metafunc.fixturenames:
        return
    module = metafunc.module.__name__.rpartition(".")[2] + "."
    if not module.startswith(BOTH_BACKENDS):
        return                                  # the fixture's default: python
    chosen = metafunc.config.getoption("--p4sim-backend")
    backends = ["python", "c"] if chosen == "both" else [chosen]
    if metafunc.definition.get_closest_marker("python_backend"):
        backends = ["python"]
    metafunc.parametrize("p4sim_backend", backends, indirect=True)


class _Fallbacks(logging.Handler):
    """Collects the C backend's "cannot run ...; using the Python backend" lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "Python backend" in record.getMessage():
            self.lines.append(record.getMessage())


@pytest.fixture(autouse=True)
def p4sim_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The backend this test's switches run on (P4SIM_BACKEND for the test's duration)."""
    name = getattr(request, "param", "python")
    monkeypatch.setenv("P4SIM_BACKEND", name)
    watch = _Fallbacks()
    logger = logging.getLogger("p4sim.backends")
    logger.addHandler(watch)
    try:
        yield name
    finally:
        logger.removeHandler(watch)
    if watch.lines and not request.node.get_closest_marker("c_fallback"):
        pytest.fail(f"ran on the Python backend instead of C: {watch.lines[0]}")

REPO_ROOT = PROGRAMS_DIR.parent.parent


def reference_dir(name: str) -> Path | None:
    """`shared/reference/<name>` beside the repository (as CI lays it out), looked up from the
    nearest ancestor that has it: a git worktree sits a level deeper than the main checkout."""
    for base in REPO_ROOT.parents:
        candidate = base / "shared" / "reference" / name
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture(scope="session")
def p4program() -> Callable[[str], Program]:
    """`p4program("ipv4_router")` compiles tests/p4programs/ipv4_router.p4 once."""
    # Imported here so the other p4sim tests still collect while p4sim is incomplete.
    from p4sim import compile_file

    compiled: dict[str, Program] = {}

    def load(name: str) -> Program:
        if name not in compiled:
            compiled[name] = compile_file(str(PROGRAMS_DIR / f"{name}.p4"))
        return compiled[name]

    return load


@pytest.fixture
def make_switch(p4program: Callable[[str], Program]) -> Callable[..., Switch]:
    """`make_switch("calc", cpu_port=255)`: a new switch with fresh state."""
    from p4sim import Switch

    def make(name: str, **kwargs) -> Switch:
        return Switch(p4program(name), **kwargs)

    return make


# p4runtime-shell's handshake waits 2 s (hard-coded) for the arbitration answer, then calls
# sys.exit(1); a switch on a busy machine (load 10 on 2 cores) can take longer than that.
ARBITRATION_WAIT_S = 60.0


@pytest.fixture
def p4runtime_shell(monkeypatch: pytest.MonkeyPatch):
    """`p4runtime_sh.shell`, whose setup waits up to ARBITRATION_WAIT_S for arbitration."""
    import p4runtime_sh.shell as sh
    from p4runtime_sh.p4runtime import P4RuntimeClient

    original = P4RuntimeClient.get_stream_packet

    def get_stream_packet(self: P4RuntimeClient, type_: str, timeout: float = 1):
        return original(self, type_, ARBITRATION_WAIT_S if type_ == "arbitration" else timeout)

    monkeypatch.setattr(P4RuntimeClient, "get_stream_packet", get_stream_packet)
    return sh


@contextlib.contextmanager
def pushed_switch(sh, program_path: Path, tmp_path: Path, cpu_port: int | None = None,
                  transmit: Callable[[int, bytes], None] = lambda port, data: None) -> Iterator[tuple]:
    """A p4sim switch started with no program behind a P4Runtime server on a free loopback
    port, pushed `program_path` by p4runtime-shell `sh`; yields (switch, service)."""
    from p4sim import Program, Switch, compile_file
    from p4sim.p4info import build_p4info, to_text
    from p4sim.runtime.p4runtime import P4RuntimeService, serve

    program = compile_file(str(program_path))
    p4info_path, config_path = tmp_path / "p4info.txt", tmp_path / "device_config.json"
    p4info_path.write_text(to_text(build_p4info(program.info)))
    config_path.write_bytes(program.device_config())
    switch = Switch(None, cpu_port=cpu_port)
    service = P4RuntimeService(switch, Program.from_device_config, device_id=1, cpu_port=cpu_port,
                               transmit=transmit)
    switch.on_digest = service.digest
    server, port = serve(service, "127.0.0.1:0")
    try:
        sh.setup(device_id=1, grpc_addr=f"127.0.0.1:{port}", election_id=(0, 1),
                 config=sh.FwdPipeConfig(str(p4info_path), str(config_path)), verbose=False)
        try:
            yield switch, service
        finally:
            sh.teardown()
    finally:
        server.stop(None)
        service.close()
