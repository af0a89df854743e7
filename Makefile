# Set-up is part of every entry point: `make run` and `make test` work on a fresh machine
# (Python 3.11, Java 17, root) and are fast no-ops when nothing changed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.9
CONFIG ?= config.example.toml
PYTEST_ARGS ?=

.PHONY: setup run test test-fast bench lint demo clean protos sim

setup: $(STAMP) jdbc java chromium net

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	@# uv installs the same pinned set as pip in less than half the time on a fresh machine
	@# (parallel downloads and builds: 39 s against 85 s without a cache, docs/testing.md).
	$(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(VENV)/bin/uv pip install --quiet --python $(PY) \
	  -c constraints.txt -e '.[dev]'
	@# libp2p pulls in trio-typing, whose stale trio-stubs hide trio's own inline types from
	@# mypy (no trio.TaskStatus, old to_thread signature); the runtime never imports them.
	rm -rf $(VENV)/lib/python*/site-packages/trio-stubs
	touch $(STAMP)

.PHONY: jdbc java chromium net
jdbc:
	@bash scripts/setup_jdbc.sh

# Debian's chromium, for the status page's browser test (Playwright never downloads one).
chromium:
	@bash scripts/setup_chromium.sh

java:
	@bash scripts/check_java.sh

net:
	@bash scripts/setup_net.sh

run: setup
	$(VENV)/bin/syncnode run --config $(CONFIG)

# pytest exits 5 when it collected nothing: that must never pass silently.
# The suite runs on TEST_WORKERS pytest-xdist workers (0: in this process, one test at a time);
# --dist loadgroup keeps each group of tests/conftest.py (the shared PostgreSQL database and
# Spark; the multi-process clusters, namespaces and benchmark smokes) on one worker, in turn.
# --durations lists the slowest tests, so a CI log says where the time goes.
# Default 3 on CI's 2 cores: two left a third of the cores idle on timers and node start-ups
# (878-917 s of pytest against 635-813 s with three, docs/testing.md); TEST_WORKERS=0 runs
# serially.
# Bytecode: where PYTHONDONTWRITEBYTECODE is set (some CI images set it) Python keeps none, so
# each of the hundreds of node and CLI processes the suite starts compiled node/ and sync/ from
# source again (~0.4 s of CPU each) and each worker re-ran pytest's assertion rewriting (~7 s).
# So the sources are compiled once, and the suite runs with Python's default of keeping it.
TEST_WORKERS ?= 3
test: setup
	@$(PY) -m compileall -q -j 0 node sync storage spark_jobs scripts tests >/dev/null
	@env -u PYTHONDONTWRITEBYTECODE \
	  $(PY) -m pytest -m "not bench" -n $(TEST_WORKERS) --dist loadgroup --durations=30 \
	  $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The deterministic simulator (sync/sim, docs/sim.md) over many seeds; `make test` runs a few.
SIM_SEEDS ?= 1-25
sim: setup
	$(PY) -m sync.sim --sweep --seeds $(SIM_SEEDS)

bench: setup
	@bash scripts/bench/run_all.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy node sync storage spark_jobs scripts

protos: setup
	$(PY) scripts/gen_protos.py

demo: setup
	@bash scripts/demo.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
