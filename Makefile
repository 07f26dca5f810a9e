# django-mailqueue: `make test` runs the checks and the tests, `make demo` the example project.
# Both create .venv and install what they need on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest demo bench soak clean

# `make test` installs the package with every extra and the dev tools; `make demo` only the
# package and the demo group (SQLite needs nothing more). Either can come first in a fresh clone.
DEMO_STAMP := $(VENV)/.demo-installed

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e ".[redis,postgres,dkim,prometheus]" --group dev
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e ".[dkim]" --group demo
	touch $(DEMO_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest on two pytest-xdist workers: the suite waits on sockets, timeouts and subprocesses more than it computes.
# Each worker has its own PostgreSQL test database (pytest-django's _gw0, _gw1 suffix) and Redis database
# (MAILQUEUE_TEST_REDIS's number + the worker's index); the tests that share a session's servers or browser run
# on one worker (tests/conftest.py's XDIST_GROUPS). In one process: `make test PYTEST_ARGS=`. The tests marked
# `alone` (four worker processes held to a relay's rate) run afterwards in a pytest of their own, nothing beside them.
PYTEST_ARGS ?= -n 2 --dist loadgroup
ALONE_ARGS ?= -p no:cacheprovider

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS) -m "not alone"
	$(BIN)/pytest $(ALONE_ARGS) -m alone

test: lint typecheck pytest

# The example project on SQLite: the site on 127.0.0.1:$(PORT), a worker, and a local SMTP sink on
# 127.0.0.1:$(SINK_PORT) playing every domain's MX. Ctrl+C stops the worker (it finishes the deliveries
# under way), then the sink, then the site.
PORT ?= 8000
SINK_PORT ?= 2525

demo: $(DEMO_STAMP)
	$(BIN)/python example_project/run_demo.py --port $(PORT) --sink-port $(SINK_PORT)

# `make bench [N=5000] [REPEATS=5] [BENCH_ARGS=...]`: the benchmark against django-mailer and
# django-post-office (bench/); writes bench/RESULTS.md and bench/results.json. Never part of `make test`.
PEERS_VENV := bench/.venv-peers
N ?= 5000
REPEATS ?= 5

bench: $(STAMP)
	bash bench/setup.sh
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade -r bench/requirements-peers.txt
	$(BIN)/python -m bench.run --n $(N) --repeats $(REPEATS) $(BENCH_ARGS)

# `make soak [SOAK_MESSAGES=100000] [SOAK_STORES=redis,postgres]`: the reliability fault run at soak size
# (tests/reliability/soak.py; needs initdb/pg_ctl and redis-server). Never part of `make test`; writes SOAK_RESULTS.
SOAK_MESSAGES ?= 100000
SOAK_STORES ?= redis,postgres
SOAK_RESULTS ?= soak-results.json

soak: $(STAMP)
	SOAK_MESSAGES=$(SOAK_MESSAGES) SOAK_STORES=$(SOAK_STORES) SOAK_RESULTS=$(SOAK_RESULTS) \
		PYTHONPATH=. $(BIN)/python -m tests.reliability.soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
