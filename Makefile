# Fairlane — one vocabulary for people and CI. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV_VERSION := 0.13.8
UV ?= $(shell command -v uv 2>/dev/null || echo $(CURDIR)/.local/tools/bin/uv)
export UV_PYTHON ?= 3.11
export UV_PYTHON_DOWNLOADS ?= never
VENV := .venv
PY := $(VENV)/bin/python
PACKAGES := -p fairlane_events -p fairlane_scoring -p fairlane_sim -p fairlane_runtime -p fairlane_eval \
            -p fairlane_agent -p fairlane_scorer -p fairlane_scheduler -p fairlane
PYTEST_ARGS ?=

.PHONY: help setup run stop test test-unit lint k8s-build fmt schemas servers-up servers-down clean eval eval-quick eval-live bench bench-eval chaos

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(CURDIR)/.local/tools/bin/uv:
	@command -v python3 >/dev/null || { echo "python3 (3.11) is required" >&2; exit 1; }
	python3 -m venv .local/tools
	.local/tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(VENV)/.synced: uv.lock pyproject.toml $(wildcard libs/*/pyproject.toml services/*/pyproject.toml clients/*/pyproject.toml) | $(UV)
	$(UV) sync --frozen
	@touch $@

setup: $(VENV)/.synced ## install uv (if missing) and the locked Python environment

run: setup ## start Kafka, Postgres, scorer, scheduler and a simulated fleet; Ctrl-C stops
	scripts/stack.sh up

stop: ## stop everything `make run` started
	scripts/stack.sh down

test: setup ## unit, contract, integration and e2e tests (starts Kafka/Postgres when needed)
	@# The server-less half runs niced beside the server half (scripts/test.sh says why);
	@# pytest's "no tests collected" (5) is a failure here, not a pass.
	@PY=$(PY) scripts/test.sh $(PYTEST_ARGS)

test-unit: setup ## the tests that need no server
	$(PY) -m pytest tests/unit tests/contract $(PYTEST_ARGS)

lint: setup ## ruff, mypy --strict, import contracts, schema drift
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(PACKAGES) -p tests
	$(VENV)/bin/lint-imports
	$(PY) -m fairlane_events.schemas --check

fmt: setup ## format and autofix
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

schemas: setup ## regenerate the JSON Schemas from the record models
	$(PY) -m fairlane_events.schemas

k8s-build: ## build (once) and cache the tests' Kubernetes control plane (~10 min first time)
	scripts/k8s.sh build

servers-up: setup ## start only Kafka and Postgres (dev ports)
	scripts/kafka.sh up
	scripts/postgres.sh up

servers-down: ## stop Kafka and Postgres (dev ports)
	scripts/kafka.sh down
	scripts/postgres.sh down

eval: setup ## the evaluation on public traces -> docs/evaluation-results.md + charts (~1 h)
	$(VENV)/bin/fairlane-eval report --out docs

eval-quick: setup ## a small smoke version of `make eval`, written under .local/eval
	$(VENV)/bin/fairlane-eval report --quick --seeds 2 --out .local/eval

bench: setup ## the scorer, learner, extender and placement benchmarks, 3 runs each (~45 min; BENCHES="scorer place", RUNS=1)
	scripts/bench.sh $(BENCHES)

bench-eval: setup ## the evaluator's speed: 10,000 jobs on 1,000 GPUs (target < 5 min)
	$(PY) -m bench.eval_speed

eval-live: setup ## live stack vs offline prediction, hot-aisle (~15 min; EVAL_LIVE_ARGS=--help)
	$(PY) -m fairlane_eval.live $(EVAL_LIVE_ARGS)

chaos: setup ## faults, load and hostile input on a stack of its own; a table of losses (~25 min; CHAOS_ARGS=--short)
	$(PY) -m tests.chaos $(CHAOS_ARGS)

clean: stop ## stop everything and delete local state (keeps downloaded jars)
	scripts/kafka.sh down --purge
	scripts/postgres.sh down --purge
	rm -rf .local/run .local/logs .local/scorer-data
