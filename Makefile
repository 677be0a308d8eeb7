# One entry point for people and CI. Everything the project needs is set up from here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export STALLWATCH_KAFKA_PORT ?= 9092
export STALLWATCH_BOOTSTRAP ?= 127.0.0.1:$(STALLWATCH_KAFKA_PORT)
# The local broker is a single node: one replica of each topic (a cluster keeps the defaults, 3 and 2).
export STALLWATCH_REPLICATION_FACTOR ?= 1
export STALLWATCH_MIN_INSYNC_REPLICAS ?= 1

.PHONY: setup run test test-ts test-fast lint bench-cluster bench-tenants kafka-up kafka-down bench fuzz schemas docs dashboards clean prometheus

# Both distributions editable, in one resolution: stallwatch-streams' requirement of stallwatch is
# met by the editable root. Re-run when either project's metadata (dependencies, entry points) changes.
$(BIN)/stallwatch: pyproject.toml streams/pyproject.toml
	@echo "setup: creating $(VENV) (a few minutes on a fresh clone; pip's cache makes it quicker)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@echo "setup: installing stallwatch and stallwatch-streams with their libraries"
	$(BIN)/pip install --quiet -e '.[serve,dev,mcp,langchain,openai-agents,pydantic-ai]' -e ./streams
	@echo "setup: done ($$($(BIN)/stallwatch --version))"
	touch $@

setup: $(BIN)/stallwatch

kafka-up:
	deploy/kafka/kafka.sh up

kafka-down:
	deploy/kafka/kafka.sh down

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# Runs a command with the local broker up. A broker it starts itself starts from empty storage
# (kafka.sh fresh) and is stopped afterwards; one already running is used as it is.
with_kafka = if deploy/kafka/kafka.sh status >/dev/null 2>&1; then started=0; else started=1; \
	deploy/kafka/kafka.sh fresh || exit 1; fi; $(1); rc=$$?; \
	if [ $$started = 1 ]; then deploy/kafka/kafka.sh down; fi; exit $$rc

# The main job: a local broker, a worker, and a simulated fleet driven through them.
run: setup
	@$(call with_kafka,$(BIN)/stallwatch demo)

prometheus:
	deploy/prometheus/install.sh

# Everything, in two lanes: most tests spread over three workers (broker tests mostly wait on
# timeouts, so three share two cores well), then the tests that disrupt the shared broker, one at a
# time, beside the three-node cluster's (tests/conftest.py says which run together).
test: setup prometheus
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	@$(call with_kafka,$(BIN)/pytest -n 3 --dist loadgroup -q --durations=10 -m "not solo and not cluster" && \
		$(BIN)/pytest -n 2 --dist loadgroup -q --durations=10 -m "solo or cluster")
	$(MAKE) test-ts

# The TypeScript package: installed from its lock file, built, tested against a real serve.
test-ts: setup
	cd typescript && npm ci --no-audit --no-fund --loglevel=error && npm test

# The pure lane, no broker and no end-to-end process (make test runs these too): what `pytest`
# alone runs (pyproject.toml's addopts), over two workers, since pure tests share nothing.
test-fast: setup
	$(BIN)/pytest -q -n 2

# Replay against parse-only (no broker), the adapters against their frameworks alone, then the
# worker against a bare echo on the broker, then the fleet app at the worker's throughput, then a
# coding agent's hooks against empty ones (in-process and through the broker).
bench: setup
	$(BIN)/python benchmarks/replay_bench.py
	$(BIN)/python benchmarks/hostile_bench.py
	$(BIN)/python benchmarks/adapters_bench.py
	@$(call with_kafka,$(BIN)/python benchmarks/kafka_bench.py && $(BIN)/python benchmarks/fleet_bench.py \
		&& $(BIN)/python benchmarks/hooks_bench.py)

# A broker of three killed, frozen, killed with a worker, or restarted in turn under load: the
# workers' longest gap per partition beside a bare transactional echo's (deploy/kafka/cluster.sh;
# three brokers, so not in make bench).
bench-cluster: setup
	$(BIN)/python benchmarks/cluster_bench.py --fault kill
	$(BIN)/python benchmarks/cluster_bench.py --fault freeze
	$(BIN)/python benchmarks/cluster_bench.py --fault kill-worker
	$(BIN)/python benchmarks/cluster_bench.py --fault rolling
	deploy/kafka/cluster.sh down

# Hundreds of tenants on one worker, then a second joining (docs/tenants.md), the group model
# beside its bare echo, on a broker of its own sized for a thousand tenants' topics: fresh, its
# own port, a 2 GB heap, its partitions on a tmpfs (on this VM's disk the broker now and then held
# appends 9-18 s in a join of 300 tenants, which no worker can answer: benchmarks/README.md).
bench-tenants: export STALLWATCH_KAFKA_PORT = 9300
bench-tenants: export STALLWATCH_BOOTSTRAP = 127.0.0.1:9300
bench-tenants: export STALLWATCH_KAFKA_HEAP = 2g
bench-tenants: export STALLWATCH_KAFKA_LOG_ROOT = /dev/shm/stallwatch-bench-tenants
bench-tenants: setup
	deploy/kafka/kafka.sh down; rm -rf "$$STALLWATCH_KAFKA_LOG_ROOT/$$STALLWATCH_KAFKA_PORT"
	deploy/kafka/kafka.sh up
	$(BIN)/python benchmarks/tenants_bench.py --shapes 1x2 10x2 100x2 300x2 1000x1 --models group \
		--seconds 30; rc=$$?; deploy/kafka/kafka.sh down; rm -rf "$$STALLWATCH_KAFKA_LOG_ROOT"; exit $$rc

# The fuzz harness, the parser's quick check and the scanners' equivalence tests at length (make
# test runs a fixed number of their examples, tests/fuzz_budget.py): no broker needed.
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q tests/engine/test_fuzz.py tests/contract/test_quick_check.py \
		tests/contract/test_globs.py tests/engine/test_shell.py

schemas: setup
	$(BIN)/stallwatch schemas --write schemas/

# The settings tables of docs/operations.md, from the declarations (tests/test_settings_docs.py checks them).
docs: setup
	$(BIN)/stallwatch settings --write docs/operations.md

dashboards: setup
	$(BIN)/python deploy/grafana/build.py

clean: kafka-down
	rm -rf $(VENV) .cache/kafka-data
