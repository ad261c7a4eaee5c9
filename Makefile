# The two commands of the README:
#   make run    install everything, start a local cluster (master + 3 agents) and
#               two demo frameworks sharing it; prints progress and a summary.
#   make test   install everything and run the whole test suite.
#   make lint   ruff (lint and format check) and mypy, as configured in pyproject.toml.
#   make hooks-doc  regenerate docs/hooks.md after a change to core/mezzo/hookspecs.py.
#   make dist   build a wheel of every distribution into dist/ (DIST_DIR=...): what
#               docs/deploying.md installs on a cluster's hosts.
# Everything installs into ./.venv; system packages (thrift-compiler, zookeeper, lxc, mpich, iptables, chromium) via apt-get.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DISTS  := core plugins/drf plugins/priority plugins/lottery $(wildcard isolators/*)
STAMP  := $(VENV)/.installed
# What `make lint` checks (core/mezzo/wire, generated, is excluded in pyproject.toml).
LINT_PATHS := core plugins isolators bench docs
DIST_DIR ?= dist

.PHONY: setup bytecode run test lint dist hooks-doc thrift check-thrift bench bench-quick clean

setup: $(STAMP)

$(STAMP): $(foreach d,$(DISTS),$(d)/pyproject.toml) requirements-dev.txt tests/v1/install_pymesos.py
	@command -v thrift >/dev/null || { echo "installing thrift-compiler (apt-get)"; \
		apt-get install -y -q thrift-compiler >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q thrift-compiler >/dev/null); }
	@test -f /usr/share/java/zookeeper.jar || { echo "installing zookeeper (apt-get; the tests start their own server)"; \
		apt-get install -y -q zookeeper >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q zookeeper >/dev/null); }
	@command -v lxc-execute >/dev/null || { echo "installing lxc (apt-get; the lxc isolator's tests run real containers)"; \
		apt-get install -y -q --no-install-recommends lxc >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends lxc >/dev/null); }
	@{ command -v mpiexec >/dev/null && command -v mpicc >/dev/null; } || { echo "installing mpich (apt-get; the MPI example framework runs real MPI jobs)"; \
		apt-get install -y -q --no-install-recommends mpich libmpich-dev >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends mpich libmpich-dev >/dev/null); }
	@command -v iptables >/dev/null || { echo "installing iptables (apt-get; simulated hosts delay packets through its NFQUEUE target)"; \
		apt-get install -y -q --no-install-recommends iptables >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends iptables >/dev/null); }
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || { echo "installing chromium and chromium-driver (apt-get; the web UI's tests run in a real browser)"; \
		apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null); }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(foreach d,$(DISTS),-e ./$(d)) -r requirements-dev.txt
	$(PY) tests/v1/install_pymesos.py  # pymesos 0.3.15, which pip alone cannot install on 3.11 (docs/mesos-compatibility.md)
	$(PY) -c "from thrift.protocol import fastbinary"  # the C accelerator must be there
	touch $(STAMP)

# Bytecode for the sources installed editable: pip compiles what it installs, not these.
# Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) no import writes
# it either, and every master, agent and command the tests start would compile mezzo
# afresh: a quarter of a second each, and the benchmarks would time that. Up-to-date
# files are skipped.
bytecode: setup
	@$(PY) -m compileall -q core plugins isolators examples bench tests >/dev/null

run: bytecode
	$(PY) examples/demo.py

test: bytecode
	$(PY) -m pytest -q

# One wheel per distribution (pure Python: one build serves every host). Built without
# build isolation, with the venv's setuptools (requirements-dev.txt): seconds, not a
# fresh setuptools download per distribution. setuptools builds in each folder's build/:
# removed before (it never deletes a stale module there, and would ship it) and after
# (mypy would check the copies).
BUILD_DIRS := $(foreach d,$(DISTS),$(d)/build)
dist: setup
	@mkdir -p $(DIST_DIR) && rm -f $(DIST_DIR)/mezzo*.whl && rm -rf $(BUILD_DIRS)
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w $(DIST_DIR) $(foreach d,$(DISTS),./$(d)); \
		status=$$?; rm -rf $(BUILD_DIRS); exit $$status
	@ls -1 $(DIST_DIR)/mezzo*.whl

# Every check runs even when an earlier one fails, so one run lists everything.
# mypy runs once per distribution (see [tool.mypy] in pyproject.toml for why).
lint: setup
	@status=0; \
	echo "ruff check"; $(VENV)/bin/ruff check --output-format concise $(LINT_PATHS) || status=1; \
	echo "ruff format --check"; $(VENV)/bin/ruff format --check --output-format concise $(LINT_PATHS) || status=1; \
	for root in $(DISTS) bench docs; do \
		echo "mypy $$root"; $(VENV)/bin/mypy $$root || status=1; \
	done; \
	exit $$status

# docs/hooks.md from core/mezzo/hookspecs.py and docs/hooks.md.in (standard library only).
hooks-doc:
	$(PYTHON) docs/hooks_doc.py

thrift:
	thrift/generate.sh

# Every benchmark, each rewriting its section of docs/benchmarks.md (several hours on 2 cores:
# the §6.1 macrobenchmark and Fig. 9 take about 35 and 25 minutes).
bench: bytecode
	$(PY) -m pip install -q matplotlib  # the plots (Fig. 10, ramp-up, §4.3, Figs. 5-9)
	$(PY) bench/allocation_cycle.py
	$(PY) bench/fig10.py
	$(PY) bench/throughput.py
	$(PY) bench/state_polling.py
	$(PY) bench/failover.py
	$(PY) bench/short_tasks.py
	$(PY) bench/overhead.py
	$(PY) bench/isolator_cost.py
	$(PY) bench/bandwidth.py
	$(PY) bench/cpu_isolation.py
	$(PY) bench/rampup.py
	$(PY) bench/lottery_locality.py
	$(PY) bench/fig8.py
	$(PY) bench/revocation_check.py
	$(PY) bench/cli_latency.py
	$(PY) bench/queue_throughput.py
	$(PY) bench/capacity.py
	$(PY) bench/overload.py
	$(PY) bench/message_stalls.py
	$(PY) bench/http_polling.py
	$(PY) bench/tls_cost.py
	$(PY) bench/task_cost.py
	$(PY) bench/v1_cost.py
	$(PY) bench/fig9.py
	$(PY) bench/macrobenchmark.py
	$(PY) bench/partition.py

# The paper's Fig. 10 at 1,000 and 5,000 agents only: a few minutes, writes nothing.
bench-quick: bytecode
	$(PY) bench/fig10.py --quick --no-write

clean:
	rm -rf $(VENV) .pytest_cache
