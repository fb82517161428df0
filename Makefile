VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test test-patroni test-fast lint

# Test processes: the e2e tests mostly wait on the servers they start, so more than the 2 cores
# this is tuned for; PostgreSQL's 100 connections bound it (tests/conftest.py, many_connections).
TEST_WORKERS ?= 4
# Bytecode is written even where the environment sets PYTHONDONTWRITEBYTECODE (this machine
# does): else every `titen` process the suite starts (servers and commands, over a thousand)
# compiles titen's modules from source, a tenth of a short command's CPU (45 of 415 ms).
RUN_PYTEST := env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest -q
PYTEST := $(RUN_PYTEST) -n $(TEST_WORKERS) --dist loadgroup

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/titen serve

# Tests marked `exclusive` count or fill PostgreSQL's connections: they run last, alone.
test: $(STAMP)
	$(PYTEST) -m "not exclusive and not patroni"
	$(RUN_PYTEST) -m "exclusive and not patroni"

# Failover under Patroni and etcd (tests/cluster/test_patroni.py, as root): minutes, one at a
# time, so apart from `make test`; .ci/run runs them after it.
test-patroni: $(STAMP)
	$(RUN_PYTEST) -m patroni tests/cluster

# The inner loop: everything but the `slow` tests (real processes, tests/e2e).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

# ruff, then mypy over the package ([tool.mypy] in pyproject.toml; docs/tooling.md).
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy
