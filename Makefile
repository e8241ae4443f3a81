# p4inc's front door, after the P4 tutorials' Makefile: `make setup`, then
# `make run` (Mininet CLI), `make demo`, `make test`, `make bench`, `make stop` (ALL=1: every
# fabric on the machine), `make clean`.
# Mininet needs root. Choose the target with TARGET=p4sim (default) or TARGET=bmv2.

SHELL := /bin/bash
TARGET ?= p4sim
TOPO ?= star
HOSTS ?= 4
BUILD_DIR ?= build
# SLOW=bmv2 (or bmv2-tenth): p4sim serves packets as slowly as BMv2's default build (or a tenth).
SLOW ?=
# P4SIM_BACKEND=python (or c): p4sim's backend in every switch and test that make starts
# (default: c where a C compiler is present, else python).
P4SIM_BACKEND ?=
export P4SIM_BACKEND
# INC_K=256: build allreduce.p4 with 256 elements per packet (a multiple of 32; empty: the program's
# default, 32). MTU=9000: jumbo frames on every link (needed above K = 352); INC, ring and MPI share it.
INC_K ?=
MTU ?= 1500
RESULTS ?= results
PYTEST_ARGS ?=
BENCH_ARGS ?=

VENV := .venv
PY := $(VENV)/bin/python
# Written after a successful pip install; pip runs again only when requirements.txt changes.
VENV_STAMP := $(VENV)/.p4inc-requirements
# TORCH=1: also install the optional PyTorch extra (requirements-torch.txt: the p4inc
# torch.distributed backend, its tests and `make demo-tp TP_IMPL=torch`); without it those skip.
TORCH ?=
TORCH_STAMP := $(VENV)/.p4inc-requirements-torch
# Debian packages: Mininet's mnexec and mn, the tools Mininet hosts use, cpp for p4sim's
# preprocessor, nftables for link loss (this kernel has no netem), python3-venv for .venv, and
# Open MPI (mpirun, and the libmpi that mpi4py loads) for the benchmark's MPI_Allreduce baseline.
# gcc and libc6-dev build p4sim's C backend and the hosts' compiled engine.
APT_PACKAGES := mininet iputils-ping bridge-utils ethtool iproute2 tcpdump cpp nftables \
	net-tools python3 python3-venv procps openmpi-bin libopenmpi-dev gcc libc6-dev

WIDTH := --mtu $(MTU) $(if $(INC_K),--elements-per-packet $(INC_K))
RUN := $(PY) -m topologies.run --topo $(TOPO) --hosts $(HOSTS) --target $(TARGET) --build-dir $(BUILD_DIR) \
	$(WIDTH) $(if $(SLOW),--slow $(SLOW))

.PHONY: setup apt run demo test bench bench-collectives fuzz-p4sim stop clean mutation

setup: apt $(VENV_STAMP) $(if $(TORCH),$(TORCH_STAMP))

apt:
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "apt-get install $$missing"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(VENV_STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	touch $@

$(TORCH_STAMP): requirements-torch.txt $(VENV_STAMP)
	$(PY) -m pip install -q -r requirements-torch.txt
	touch $@

run: $(VENV_STAMP)
	$(RUN) --cli

demo: $(VENV_STAMP)
	$(RUN) --demo

test: $(VENV_STAMP)
	$(PY) -m pytest --target $(TARGET) $(PYTEST_ARGS)

# p4sim's packet rate in process and over veths (both backends), a worker's packet rate, the
# latency budget of one 256 B INC call, then INC vs ring vs MPI_Allreduce in Mininet from 64 B to 4 MiB (about 20 minutes on 2 cores),
# then the latency model fitted to it and the plots, all in $(RESULTS)/. A quick look:
# make bench BENCH_ARGS="--workers 2 4 --sizes 64,4096 --reps 2".
bench: $(VENV_STAMP)
	$(PY) -m bench.p4sim -o $(RESULTS)/p4sim.json
	$(PY) -m bench.dataplane -o $(RESULTS)/dataplane.json
	$(PY) -m bench.host -o $(RESULTS)/host.json
	$(PY) -m bench --budget --reps 50 --target $(TARGET) $(WIDTH) -o $(RESULTS)/budget.json
	$(PY) -m bench --target $(TARGET) $(WIDTH) -o $(RESULTS)/bench.json $(BENCH_ARGS)
	$(PY) -m analysis $(RESULTS)/bench.json -o $(RESULTS)

# The switch's Reduce, ReduceScatter, Broadcast, AllGather and Barrier against their host ring
# baselines on one Mininet star of 8, 256 B to 1 MiB, every result checked against numpy: JSON
# and a plot in $(RESULTS)/ (under a minute on an idle 2-core machine; not part of `bench`). A quick look:
# make bench-collectives BENCH_ARGS="--workers 4 --sizes 1024 --reps 1".
bench-collectives: $(VENV_STAMP)
	$(PY) -m bench.collectives --target $(TARGET) $(WIDTH) -o $(RESULTS)/collectives.json $(BENCH_ARGS)

# Differential testing of p4sim's backends on generated programs (tests/p4sim/p4fuzz.py): programs
# SEED:0, SEED:1, ... for MINUTES, each on every backend; failing programs are kept and named.
SEED ?= 1
MINUTES ?= 10
fuzz-p4sim: $(VENV_STAMP)
	PYTHONPATH=. $(PY) tests/p4sim/p4fuzz.py --seed $(SEED) --minutes $(MINUTES)

# Ends what this checkout's fabric recorded in $(BUILD_DIR)/run, then Mininet's own cleanup (`mn -c`,
# which tears down every Mininet fabric on the machine) only when no other checkout's fabric is up
# or left processes running; ALL=1 runs `mn -c` regardless (topologies/cleanup.py).
ALL ?=
stop:
	-@if test -x $(PY); then $(PY) -m topologies.cleanup --build-dir $(BUILD_DIR) $(if $(ALL),--all); \
	elif [ -n "$(ALL)" ]; then mn -c; \
	else echo "no $(VENV): this checkout started no fabric; make stop ALL=1 runs mn -c"; fi

clean: stop
	rm -rf $(BUILD_DIR) results pcaps logs *.pcap mutants

# Mutation testing (mutmut, requirements-dev.txt) of hosts/numerics.py, hosts/quantize.py and p4sim's
# expression code against the fast tests that cover them (pyproject.toml, [tool.mutmut]); the score
# and every mutant no test killed go to docs/results/mutation.md (about an hour on 2 cores).
mutation: $(VENV_STAMP)
	$(PY) -m pip install -q -r requirements-dev.txt
	rm -rf mutants
	$(PY) -m mutmut run --max-children 2
	$(PY) -m tests.mutation_report -o docs/results/mutation.md

# Tensor-parallel decoding on a star of N = 2, 4, 8 hosts (TP_WORKERS), with INC, the host ring
# and MPI_Allreduce, each checked against the single-process reference: a table, $(RESULTS)/tp.json and tp.png.
# TP_IMPL=torch: the PyTorch decoder (workloads/torch_decoder.py) on torch.distributed, p4inc
# against gloo through the same switch (needs make setup TORCH=1); results in $(RESULTS)/tp-torch.json.
# TP_REPS generations of TP_TOKENS tokens per backend and N, rotating which goes first: this
# machine's speed drifts on the scale of a generation (docs/measurements.md), and 48 tokens a
# point moved INC over MPI at N = 8 by 1.5x between runs. A last row per N runs the same ranks
# with no collectives: the floor (workloads/demo.py).
TP_WORKERS ?= 2 4 8
TP_TOKENS ?= 64
TP_REPS ?= 3
TP_IMPL ?= numpy
.PHONY: demo-tp
demo-tp: $(VENV_STAMP)
	$(PY) -m workloads.demo --target $(TARGET) $(WIDTH) --impl $(TP_IMPL) --workers $(TP_WORKERS) --tokens $(TP_TOKENS) \
		--reps $(TP_REPS) -o $(RESULTS)/$(if $(filter torch,$(TP_IMPL)),tp-torch,tp).json

# DDP step time on a star of DDP_WORKERS hosts: the same training on gloo and on the p4inc
# torch.distributed backend through one switch, parameters checked (needs make setup TORCH=1):
# the median step time of each and $(RESULTS)/ddp.json. DDP_WIDTH=690 is 3.9 MiB of gradients.
DDP_WORKERS ?= 8
DDP_WIDTH ?= 690
.PHONY: demo-ddp
demo-ddp: $(VENV_STAMP)
	$(PY) -m workloads.ddp_demo --target $(TARGET) $(WIDTH) --workers $(DDP_WORKERS) --width $(DDP_WIDTH) -o $(RESULTS)/ddp.json
