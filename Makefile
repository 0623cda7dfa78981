# lightning-lars. `make help` lists the targets; `make recipe=NAME key=value ...` runs a recipe.
# Every target installs what it needs first, once: Debian packages for FFCV, a venv in .venv, the project.
SHELL := /bin/bash
.DEFAULT_GOAL := train

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCK := lightning_lars/requirements/lock-newest.txt
OLDEST_VENV := .venv-oldest
OFFLINE_VENV := .venv-offline
OFFLINE_WHEELS := .wheelhouse-ci
APT_PACKAGES := libturbojpeg0-dev libopencv-dev pkg-config

recipe ?= demo
# Every command-line `key=value` that is not one of make's own variables is a Hydra override, except an upper-case
# name (LARS_DATA_DIR=/data): make exports that to the program's environment, as `export LARS_DATA_DIR=` would.
# None of make's own may be a key or group of the config (data, model, seed, ...): make would keep it from the
# program (bench-largebatch's data set is bench_data= for that reason).
MAKE_VARS := recipe src out kit nodes devices seeds workers args python platform without sweep multirun PY \
             bench_data ratio only epochs px results dir
# Each override whole and shell-quoted, in command-line order: a value may hold spaces (data.root="/my data").
# MAKEOVERRIDES writes such a space as "\ ", which make's word functions split at, so only the names are read
# from it (make lists them last first); each value comes whole from its variable, unexpanded (a Hydra ${...}
# stays as typed).
quote = '$(subst ','\'',$(1))'
lower_case := a b c d e f g h i j k l m n o p q r s t u v w x y z
reverse = $(if $(1),$(call reverse,$(wordlist 2,$(words $(1)),$(1))) $(firstword $(1)))
override_names = $(foreach w,$(call reverse,$(MAKEOVERRIDES)),$(if $(findstring =,$(w)),$(firstword $(subst =, ,$(w)))))
is_override = $(and $(filter command line,$(origin $(1))),$(filter-out $(MAKE_VARS),$(1)),\
                    $(strip $(foreach c,$(lower_case) .,$(findstring $(c),$(1)))))
OVERRIDES = $(foreach n,$(override_names),$(if $(call is_override,$(n)),$(call quote,$(n)=$(value $(n)))))

.PHONY: help install system-deps slurm-deps train demo demo-data prepare verify recipes recipe-card check test test-slow test-fast test-full \
        oldest-venv test-oldest test-install offline-image test-offline wheelhouse gpu-kit gpu-check test-gpu bench-gpu \
        bench bench-optim bench-data bench-comm bench-startup bench-largebatch format lint clean-logs clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "  Hydra overrides ride along, config groups too: make recipe=goyal_8k data=imagefolder data.root=DIR trainer.devices=8"
	@echo '  The GPU job through the device tool (after make gpu-kit): run(command="python3 benchmarks/gpu_check.py --kit gpu-kit",'
	@echo '  carry=["gpu-kit"], timeout_s=540); then here: tar -xzf <files_at>/results.tar.gz -C benchmarks/results'

system-deps: ## Debian packages FFCV builds against (apt-get; sudo when not root)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO=sudo; else \
	  echo "error: FFCV needs the Debian packages: $$missing; ask an admin to run: sudo apt-get install -y $$missing" >&2; exit 2; fi; \
	echo "installing $$missing (for FFCV)"; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null

slurm-deps: ## Debian's slurm-wlm: the one-node SLURM cluster the launcher tests of make test-slow start (as root)
	@command -v slurmctld >/dev/null && exit 0; \
	if [ "$$(id -u)" != 0 ]; then echo "skipping slurm-wlm: not root (the SLURM tests say so and skip)"; exit 0; fi; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null

$(STAMP): pyproject.toml $(LOCK)
	@$(MAKE) --no-print-directory system-deps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the newest tested set ($(LOCK)) as constraints: a clone reproduces the versions CI ran.
	# torch and torchvision first, as a pair: they must be the same build (see README, Set-up)
	$(PY) -m pip install -q -c $(LOCK) torch torchvision
	$(PY) -m pip install -q -c $(LOCK) -e '.[dev,ffcv,mlperf]'
	@touch $@

install: $(STAMP) ## create .venv and install the project at the locked newest versions (once)

$(OLDEST_VENV)/.installed: lightning_lars/requirements/oldest.txt pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	@test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q -r lightning_lars/requirements/oldest.txt
	# the project itself, editable: lightning_lars.callbacks is the top-level callbacks/ (pyproject's package-dir)
	$(OLDEST_VENV)/bin/python -m pip install -q --no-deps -e .
	@touch $@

# make cannot pass -m (it would read it as its own flag): multirun=1 is Hydra's --multirun, a sweep of seed=0,1 ...
train: $(STAMP) ## run a recipe: make recipe=NAME [nodes=N devices=G] [multirun=1 seed=0,1] [args="--cfg job"] [key=value ...]
ifneq ($(nodes)$(devices),)
	$(PY) -m lightning_lars.parallel.launch --nodes $(or $(nodes),1) --devices $(or $(devices),1) $(args) $(call quote,recipe=$(recipe)) $(OVERRIDES)
else
	$(PY) -m lightning_lars.train $(if $(multirun),--multirun) $(args) $(call quote,recipe=$(recipe)) $(OVERRIDES)
endif

demo-data: $(STAMP) ## generate the demo dataset and convert it to FFCV: data/demo/ [out=DIR] [args=--force]
	$(PY) -m lightning_lars.data.demo --out $(call quote,$(or $(out),data/demo)) $(args)

demo: demo-data ## the embedded default, end to end on CPU in minutes
	$(PY) -m lightning_lars.train recipe=demo $(OVERRIDES)

prepare: $(STAMP) ## ImageFolder -> FFCV: make prepare src=/path/to/imagenet out=data/imagenet [args="--max-resolution 512"]
	@test -n "$(src)" -a -n "$(out)" || { echo "usage: make prepare src=DIR out=DIR (DIR with train/<class>/*.JPEG, val/<class>/*.JPEG)" >&2; exit 2; }
	$(PY) -m lightning_lars.data.prepare --src $(call quote,$(src)) --out $(call quote,$(out)) $(args)

# Reads every byte (about 1-2 minutes per 140 GB on an NVMe drive); a run's start checks sizes and samples regions.
verify: $(STAMP) ## check a prepared dataset against its manifest's checksums: make verify [dir=data/demo] [args=--record]
	$(PY) -m lightning_lars.data.verify $(call quote,$(or $(dir),data/demo)) $(args)

recipes: $(STAMP) ## list the recipes with their published results
	@$(PY) -m lightning_lars.recipe.catalog

recipe-card: $(STAMP) ## what a recipe will do, step by step: make recipe-card recipe=NAME [devices=G nodes=N] [args="--plot card.png"] [key=value ...]
	@$(PY) -m lightning_lars.recipe_card $(call quote,$(recipe)) --devices $(or $(devices),1) --nodes $(or $(nodes),1) $(args) $(OVERRIDES)

check: $(STAMP) ## K seeds of a recipe, mean/std and a one-sided t-test vs its target: make check recipe=NAME seeds=5
	$(PY) -m lightning_lars.check --recipe $(call quote,$(recipe)) --seeds $(or $(seeds),3) $(OVERRIDES)

# Tiers: `make test` is the fast tier plus the demo end to end (about 10 minutes on 2 cores with the install);
# `make test-slow` the remaining integration tests (multi-process gloo, every recipe, resume after SIGKILL,
# preemption); CI runs both. GPU tests are marked `gpu` and skipped without a GPU.
# The demo test (tests/integration/test_demo_end_to_end.py) is marked `demo`: naming its file after
# `-m "not slow"` did not run it, for -m filters named files too. -n auto: pytest-xdist, a process per core.
test: $(STAMP) ## unit tests (seconds each) + the demo pipeline end to end
	$(PY) -m pytest -q -n auto --durations=10 -m "not slow or demo" tests

# test-slow runs two pytest processes (workers=N to change): most of its tests wait on subprocesses that import
# the stack single-threaded, so two overlap well on 2 cores (79 tests: 1051 s against 1755 s one at a time,
# 2026-11-23); each test already starts 1-4 processes of its own, so a process per core would need their memory.
# --dist loadfile: a file's tests share one process, so a module fixture (the installed wheel, which pip builds
# in the clone's build/) runs once, never twice at the same time.
test-slow: $(STAMP) ## the other integration tests: multi-process gloo, every recipe, resume, preemption
	$(PY) -m pytest -q -n $(or $(workers),2) --dist loadfile --durations=15 -m "slow and not demo" tests

oldest-venv: $(OLDEST_VENV)/.installed ## install the oldest supported set into .venv-oldest (about 1.9 GB from PyPI, once)

test-oldest: $(OLDEST_VENV)/.installed ## unit tests on the oldest supported set (lightning_lars/requirements/oldest.txt, torch 2.11)
	$(OLDEST_VENV)/bin/python -m pytest -q -p no:cacheprovider -n auto --durations=5 -m "not slow" tests/unit

test-install: $(STAMP) ## the built wheel, installed in a fresh venv, run from another folder (as a user would)
	$(PY) -m pytest -q tests/integration/test_installed_wheel.py

wheelhouse: $(STAMP) ## wheels for offline nodes: make wheelhouse [python=3.12 platform=manylinux_2_28_x86_64 without=torch out=DIR]
	$(PY) benchmarks/wheelhouse.py --out $(call quote,$(or $(out),wheelhouse)) $(if $(python),--python $(python)) \
	    $(if $(platform),--platform $(platform)) $(if $(without),--without $(without))

# A GPU node with CUDA torch, torchvision, lightning, timm, torchmetrics, numba and OpenCV (Python 3.12): the rest,
# FFCV's wheel built here with a Python of that version (pyenv's) and its libraries inside; kit + tree <= 64 MiB
gpu-kit: $(STAMP) ## wheels a GPU node still needs, FFCV's built here: make gpu-kit [python=3.12 platform=manylinux_2_28_x86_64 out=gpu-kit]
	$(PY) benchmarks/gpu_kit.py --out $(call quote,$(or $(out),gpu-kit)) --python $(or $(python),3.12) \
	    --platform $(or $(platform),manylinux_2_28_x86_64)

# On the node, from the clone's root, no internet: the kit installed offline, then every GPU part in one job of at
# most 8 minutes; its files go to benchmarks/results/<date>-<device>/ and, packed, to $OUT (or out=DIR).
# kit=none runs it in the environment as it is (here: every GPU part says why it skipped). Through the device tool:
#   run(command="python3 benchmarks/gpu_check.py --kit gpu-kit", carry=["gpu-kit"], timeout_s=540)
# then, where it ran from: tar -xzf <files_at>/results.tar.gz -C benchmarks/results
gpu-check: ## the one GPU job (<= 8 min), files in benchmarks/results/: make gpu-check [kit=gpu-kit|none out=DIR results=DIR]
	$(GPU_PY) benchmarks/gpu_check.py --kit $(call quote,$(or $(kit),gpu-kit)) $(if $(out),--out $(call quote,$(out))) \
	    $(if $(results),--results $(call quote,$(results)))

# The offline check's image (a venv with only what a GPU image has) and the small wheelhouse, made fresh
$(OFFLINE_VENV)/.image: $(STAMP) $(LOCK)
	rm -rf $(OFFLINE_WHEELS)
	$(PY) benchmarks/wheelhouse.py --out $(OFFLINE_WHEELS) --without torch
	.ci/offline_install image $(OFFLINE_VENV)
	@touch $@

offline-image: $(OFFLINE_VENV)/.image ## the small wheelhouse and a torch-only venv for test-offline (downloads ~200 MiB)

test-offline: $(OFFLINE_VENV)/.image ## the small wheelhouse installs the project with --no-index into a torch-only venv, runs it
	@rm $(OFFLINE_VENV)/.image  # the check installs into the image: the next check starts from a fresh one
	.ci/offline_install check $(OFFLINE_VENV) $(OFFLINE_WHEELS)

# GPU work runs on a node that may hold only a CUDA torch plus the small wheelhouse (README, Offline nodes):
# there no .venv is made; the python on PATH runs it (or GPU_PY=...).
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)

test-gpu: ## the gpu-marked tests (CUDA): bf16/fp16, channels_last, LARS/LAMB vs float64, FSDP2/DDP on NCCL, a recipe
	$(GPU_PY) -m pytest -q -p no:cacheprovider -m gpu -rs tests

bench-gpu: ## ResNet-50 images/s, ours vs a bare loop (bf16, channels_last, compile); LARS/LAMB step; loader
	$(GPU_PY) benchmarks/bench_gpu.py

test-fast: $(STAMP) ## unit tests only
	$(PY) -m pytest -q -m "not slow" tests

test-full: $(STAMP) ## everything
	$(PY) -m pytest -q --durations=15 tests

bench: bench-optim bench-data bench-comm bench-bn bench-startup bench-largebatch ## all benchmarks (tables with ratios; results go in BENCHMARKS.md)

bench-optim: $(STAMP) ## our LARS/LAMB (eager, compiled) vs torch's fastest SGD/AdamW: ms/step, compile s, ops/step
	$(PY) benchmarks/bench_optim.py

bench-data: $(STAMP) ## FFCV vs torchvision images/s, conversion rate, decode ceiling
	$(PY) benchmarks/bench_data.py

bench-comm: $(STAMP) ## 4 gloo processes: DDP default vs bucket_cap_mb_list vs our hooks; planner tables
	$(PY) benchmarks/bench_comm.py

.PHONY: bench-bn
bench-bn: $(STAMP) ## ghost BN vs torch BN vs the old Python ghost BN: activation memory per image (ResNet-50)
	$(PY) benchmarks/bench_bn.py

bench-startup: $(STAMP) demo-data ## seconds to a one-line error and to the end of a debug=toy run, vs importing torch+Lightning
	PYTHONPATH=. $(PY) benchmarks/bench_startup.py

# Slow on 2 cores: every compiled cell compiles from an empty inductor cache, as a user's first run does.
.PHONY: bench-speed
bench-speed: $(STAMP) ## model.compile: our module vs a bare loop (demo, eager/compiled), ResNet-50 224 px fp32/bf16 [args=...]
	$(PY) benchmarks/bench_speed.py $(args)

bench-largebatch: $(STAMP) $(if $(bench_data),,demo-data) ## recipes at a small vs a large batch (ratio x N): make bench-largebatch bench_data=DIR ratio=0.1 seeds=2 [only="sgd_small lamb" epochs=8 px=32]
	PYTHONPATH=. $(PY) benchmarks/bench_largebatch.py --data $(call quote,$(or $(bench_data),data/demo)) --ratio $(or $(ratio),0.1) --seeds $(or $(seeds),2) $(if $(epochs),--epochs $(epochs)) $(if $(px),--resolution $(px)) $(if $(only),--only $(only))

format: $(STAMP) ## ruff format + fix (the rules: pyproject.toml [tool.ruff])
	$(PY) -m ruff format . && $(PY) -m ruff check --fix .

lint: $(STAMP) ## what CI enforces: ruff format --check and ruff check, the whole tree
	$(PY) -m ruff format --check . && $(PY) -m ruff check .

clean-logs: ## delete run folders under logs/
	rm -rf logs/*

clean: ## delete the venv, caches and generated demo data
	rm -rf $(VENV) $(OLDEST_VENV) $(OFFLINE_VENV) $(OFFLINE_WHEELS) .ci-work data/demo .pytest_cache
