"""Command-line options of the test suite. Here, at the root, because pytest reads options only
from conftest files it loads before collecting (the tests' fixtures are in tests/conftest.py;
p4sim's backend parametrisation in tests/p4sim/conftest.py)."""
import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--target", choices=("p4sim", "bmv2"), default="p4sim",
                     help="the switch the Mininet fabric tests run on (make test TARGET=bmv2); "
                          "bmv2 needs simple_switch_grpc and p4c on PATH, else those tests skip")
    parser.addoption("--p4sim-backend", choices=("python", "c", "both"), default="both",
                     help="the p4sim backends the in-process p4sim tests run on (default both: each "
                          "of those tests runs once on the Python backend and once on the C backend)")
