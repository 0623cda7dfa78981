# lightning-lars. `make help` lists the targets; `make recipe=NAME key=value ...` runs a recipe.
# Every target installs what it needs first, once: Debian packages for FFCV, a venv in .venv, the project.
SHELL := /bin/bash
.DEFAULT_GOAL := train

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PACKAGES := libturbojpeg0-dev libopencv-dev pkg-config

recipe ?= demo
# Every command-line `key=value` that is not one of make's own variables is a Hydra override.
MAKE_VARS := recipe=% src=% out=% nodes=% devices=% seeds=% workers=% args=% PY=%
OVERRIDES := $(filter-out $(MAKE_VARS),$(MAKEOVERRIDES))

.PHONY: help install system-deps train demo demo-data prepare recipes check test test-slow test-fast test-full \
        bench bench-optim bench-data bench-comm bench-startup format lint clean-logs clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "  Hydra overrides ride along: make recipe=goyal_8k trainer.devices=8 batch.max_per_device=64"

system-deps: ## Debian packages FFCV builds against (apt-get; sudo when not root)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO=sudo; else \
	  echo "error: FFCV needs the Debian packages: $$missing; ask an admin to run: sudo apt-get install -y $$missing" >&2; exit 2; fi; \
	echo "installing $$missing (for FFCV)"; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch and torchvision first, as a pair: they must be the same build (see README, Set-up)
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

install: $(STAMP) ## create .venv and install the project (once)

train: $(STAMP) ## run a recipe: make recipe=NAME [nodes=N devices=G] [key=value ...]
ifneq ($(nodes)$(devices),)
	$(PY) -m lightning_lars.parallel.launch --nodes $(or $(nodes),1) --devices $(or $(devices),1) recipe=$(recipe) $(OVERRIDES)
else
	$(PY) -m lightning_lars.train recipe=$(recipe) $(OVERRIDES)
endif

demo-data: $(STAMP) ## generate the demo dataset and convert it to FFCV: data/demo/ [out=DIR] [args=--force]
	$(PY) -m lightning_lars.data.demo --out "$(or $(out),data/demo)" $(args)

demo: demo-data ## the embedded default, end to end on CPU in minutes
	$(PY) -m lightning_lars.train recipe=demo $(OVERRIDES)

prepare: $(STAMP) ## ImageFolder -> FFCV: make prepare src=/path/to/imagenet out=data/imagenet [args="--max-resolution 512"]
	@test -n "$(src)" -a -n "$(out)" || { echo "usage: make prepare src=DIR out=DIR (DIR with train/<class>/*.JPEG, val/<class>/*.JPEG)" >&2; exit 2; }
	$(PY) -m lightning_lars.data.prepare --src "$(src)" --out "$(out)" $(args)

recipes: $(STAMP) ## list the recipes with their published results
	@$(PY) -m lightning_lars.recipes

check: $(STAMP) ## K seeds of a recipe, mean/std and a one-sided t-test vs its target: make check recipe=NAME seeds=5
	$(PY) -m lightning_lars.check --recipe $(recipe) --seeds $(or $(seeds),3) $(OVERRIDES)

# Tiers: `make test` is the fast tier plus the demo end to end (about 10 minutes on 2 cores with the install);
# `make test-slow` the remaining integration tests (multi-process gloo, every recipe, resume after SIGKILL,
# preemption); CI runs both. GPU tests are marked `gpu` and skipped without a GPU.
E2E := tests/integration/test_demo_end_to_end.py

test: $(STAMP) ## unit tests (seconds each) + the demo pipeline end to end
	$(PY) -m pytest -q --durations=10 -m "not slow" tests $(E2E)

test-slow: $(STAMP) ## the other integration tests: multi-process gloo, every recipe, resume, preemption
	$(PY) -m pytest -q --durations=15 -m slow --deselect $(E2E)::test_generate_prepare_train_and_log_offline tests

test-fast: $(STAMP) ## unit tests only
	$(PY) -m pytest -q -m "not slow" tests

test-full: $(STAMP) ## everything
	$(PY) -m pytest -q --durations=15 tests

bench: bench-optim bench-data bench-comm bench-startup ## all benchmarks (tables with ratios; results go in BENCHMARKS.md)

bench-optim: $(STAMP) ## our LARS vs timm Lars vs torch SGD: ms/step and dispatched ops/step
	$(PY) benchmarks/bench_optim.py

bench-data: $(STAMP) ## FFCV vs torchvision images/s, conversion rate, decode ceiling
	$(PY) benchmarks/bench_data.py

bench-comm: $(STAMP) ## DDP step time with and without our comm hook; bucket planner table
	$(PY) benchmarks/bench_comm.py

bench-startup: $(STAMP) demo-data ## seconds to a one-line error and to the end of a debug=toy run, vs importing torch+Lightning
	PYTHONPATH=. $(PY) benchmarks/bench_startup.py

format: $(STAMP) ## ruff format + fix
	$(PY) -m ruff format lightning_lars callbacks tests benchmarks && $(PY) -m ruff check --fix lightning_lars callbacks tests benchmarks

lint: $(STAMP) ## ruff check
	$(PY) -m ruff check lightning_lars callbacks tests benchmarks

clean-logs: ## delete run folders under logs/
	rm -rf logs/*

clean: ## delete the venv, caches and generated demo data
	rm -rf $(VENV) data/demo .pytest_cache
