# allmem: every table and figure is a make target. `make help` lists them.
SHELL := /bin/bash
comma := ,
PY_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM := false

# The environment is locked: requirements.lock pins every package (exact versions, sha256 hashes; Python 3.11,
# torch's CPU build). `make setup` installs exactly it and checks the venv against it (scripts/lock.py);
# `make lock` refreshes it with uv (pinned here) to the newest versions pyproject.toml's ranges allow;
# `make test-latest` runs the suite on those in a throwaway venv first (docs/REPRODUCE.md, "Setup").
LOCK ?= requirements.lock
LLM_LOCK := requirements-llm.lock
LOCK_EXTRAS := dev
LOCK_PYTHON := 3.11
LOCK_PLATFORM := x86_64-manylinux_2_28
UV_VERSION := 0.13.9
TOOLS := .cache/tools
LATEST := .cache/latest
# torch's CPU build (the CUDA build that plain PyPI serves is several GB) comes from TORCH_INDEX, PyTorch's CPU
# wheel index; TORCH is what `make lock` asks for. Where pip is given a local wheel folder (PIP_FIND_LINKS, as on
# machines that cannot reach that index), the CPU wheel is taken from there and TORCH_INDEX defaults to empty.
TORCH ?= torch==2.13.0
TORCH_INDEX ?= $(if $(PIP_FIND_LINKS),,https://download.pytorch.org/whl/cpu)
LOCK_SOURCES = $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX) \
	--index-strategy unsafe-best-match)

# Paper targets (docs/REPRODUCE.md, "Tables, figures and sweeps"). Each runs its experiments: one Hydra multirun per file in
# configs/experiment/ (the compared methods and sweep grids live there, nowhere else), complete runs skipped; then
# a separate summarise step reads the run directories into results/tables (Markdown, CSV) and results/figures
# (PNG, PDF). The targets, their help lines and which experiments each needs: allmem/report/targets.ini, the one
# registry (read here with sed / awk, so `make help` works before the venv exists; `allmem paper list TARGET`).
RUNS ?= results/runs/paper
JOBS ?= 2
LME ?=
SET ?=
OUT ?= results
TARGET_ARGS = --runs $(RUNS) $(if $(LME),--lme $(LME)) $(if $(SET),--set "$(SET)")
EXPERIMENTS = $(VENV)/bin/allmem paper run --jobs $(JOBS) $(TARGET_ARGS)
SUMMARISE = $(VENV)/bin/allmem report --out $(OUT) $(TARGET_ARGS)
TARGETS_INI := allmem/report/targets.ini
PAPER_TARGETS := $(shell sed -n 's/^\[\([a-zA-Z0-9_-]*\)\]$$/\1/p' $(TARGETS_INI))
# `make memgpt_window`: MemGPT's window sweep on a generated LongMemEval-s-shaped file, written first to the path
# configs/experiment/memgpt_window.yaml reads: MGW_QUESTIONS haystacks (LongMemEval-s: 500) of MGW_SESSIONS sessions.
MGW_QUESTIONS ?= 50
MGW_SESSIONS ?= 50
MGW_FILE := data/synthetic/lme_memgpt_window.json
# `make sweep`: any multirun of your own, summarised on its own, under SWEEPS (runs) and OUT/sweeps (tables).
NAME ?= sweep
ARGS ?=
SWEEPS ?= results/runs/sweeps

.PHONY: help setup lock test-latest test test-fast test-durations llm-server llm-stop test-llm table1-llm bench-llm reproduce lint format clean bench bench-scale sweep site chromium mgw-data $(PAPER_TARGETS)

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-12s %s\n", $$1, $$2}'
	@echo "  Paper targets ($(TARGETS_INI)):"
	@awk '/^\[.*\]$$/{name=substr($$0, 2, length($$0) - 2)} /^help = /{printf "  %-12s %s\n", name, substr($$0, 8)}' $(TARGETS_INI)
	@echo "  Variables: RUNS=$(RUNS) JOBS=$(JOBS) OUT=$(OUT) LME=<file> SET=<extra overrides> (paper targets)"
	@echo "  ALLMEM_CONFIG_PATH=<folder>[:<folder>...]: your own configs; its methods join table1, sweeps, runs (docs/LIBRARY.md)"

$(STAMP): pyproject.toml setup.py $(LOCK)
	@$(PY_SYS) -c 'import sys; sys.exit(sys.version_info[:2] != ($(subst .,$(comma) ,$(LOCK_PYTHON))))' || { echo \
		"make setup: $(LOCK) is for Python $(LOCK_PYTHON), $(PY_SYS) is $$($(PY_SYS) -V 2>&1); set PY_SYS=python$(LOCK_PYTHON)"; exit 2; }
	@test -x $(PY) || $(PY_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --retries 1 --require-hashes --no-deps -r $(LOCK) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PY) -m pip install -q --no-deps -e .
	$(PY) scripts/lock.py check $(LOCK) --or $(dir $(LOCK))$(LLM_LOCK)
	@touch $(STAMP)

setup: $(STAMP) ## Create .venv with exactly requirements.lock (torch's CPU build), then allmem; idempotent

lock: ## Refresh requirements.lock: the newest versions pyproject.toml's ranges allow, hashed (uv); then make setup
	@test -x $(TOOLS)/bin/uv || { $(PY_SYS) -m venv $(TOOLS) && $(TOOLS)/bin/pip install -q uv==$(UV_VERSION); }
	printf '%s\n' "$(TORCH)" pip | $(TOOLS)/bin/uv pip compile -q pyproject.toml - $(foreach e,$(LOCK_EXTRAS),--extra $(e)) \
		--upgrade --generate-hashes --python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) $(LOCK_SOURCES) \
		--custom-compile-command "make lock" -o $(LOCK)
	@echo "[lock] wrote $(LOCK): $$(grep -c '^[A-Za-z0-9].*==' $(LOCK)) packages"
	printf '%s\n' "$(TORCH)" pip | $(TOOLS)/bin/uv pip compile -q pyproject.toml - $(foreach e,$(LOCK_EXTRAS) llm,--extra $(e)) \
		--constraint $(LOCK) --generate-hashes --python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) \
		$(LOCK_SOURCES) --custom-compile-command "make lock" -o $(dir $(LOCK))$(LLM_LOCK)
	@echo "[lock] wrote $(dir $(LOCK))$(LLM_LOCK): $(LOCK) plus the llm extra (llm=local's server)"

test-latest: ## The suite on the newest versions the ranges allow (throwaway venv); prints what differs from the lock
	rm -rf $(LATEST) && mkdir -p $(LATEST)
	$(MAKE) --no-print-directory lock LOCK=$(LATEST)/requirements.lock
	$(PY_SYS) scripts/lock.py diff $(LOCK) $(LATEST)/requirements.lock --show openai httpx2 httpx torch numpy transformers
	$(MAKE) --no-print-directory test VENV=$(LATEST)/venv LOCK=$(LATEST)/requirements.lock

# The suite (tests/ and examples/; pyproject.toml's addopts leave out `llm`) in two tiers. `make test`: ruff, then
# every test but the real-model tier (`llm`: make test-llm), the `slow` ones included; what CI runs, then test-llm.
# `make test-fast`: no test marked `slow`, i.e. none that loads the real LoCoMo or the real embedding model, starts a
# subprocess (the CLI, workers, a script, make, a browser) or takes over ~10 s; tests/conftest.py marks the users of
# the real data and model and fails an unmarked test that loads the model or starts a subprocess.
# Both spread the tests over TEST_WORKERS processes (pytest-xdist; 0: one process, in order); an idle worker takes
# tests queued for a busy one (--dist worksteal), so one long module does not hold up the end. The longest modules
# run first (tests/durations.json, written by `make test-durations`): the workers end together. The default is one
# worker per core and one more: many tests wait (on a stub's delay, a rate limit, a subprocess), and the extra
# worker uses the core they leave idle.
TEST_WORKERS ?= $(shell $(PY) -c 'import os; print(os.cpu_count() + 1)')
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist worksteal)
test: $(STAMP) lint ## Lint, then every test but the real-model tier (slow ones included; offline; what CI runs)
	$(PY) -m pytest $(XDIST)  # testpaths (pyproject.toml): tests/ and examples/

test-fast: $(STAMP) ## The suite without the slow tests (real LoCoMo or model, subprocesses, over ~10 s)
	$(PY) -m pytest $(XDIST) -m "not slow and not llm"

test-durations: $(STAMP) ## Run the suite and write each test's seconds to tests/durations.json (the order both tiers run in)
	$(PY) -m pytest $(XDIST) --store-durations

# llm=local: llama.cpp's server with a real model (allmem/llm/local_server.py; configs/llm/local.yaml holds the
# model, port and context). LLM_ARGS: llm overrides, e.g. LLM_ARGS="llm.base_url=http://127.0.0.1:9000/v1".
LLM_ARGS ?=
LLM_STAMP := $(VENV)/.llm-installed
$(LLM_STAMP): $(STAMP) $(LLM_LOCK)
	$(VENV)/bin/allmem llm install
	$(PY) scripts/lock.py check $(LLM_LOCK)
	@touch $(LLM_STAMP)

llm-server: $(LLM_STAMP) ## Start the local model's server (llama.cpp; SmolLM2-135M from its PyPI wheel) for llm=local; idempotent
	$(VENV)/bin/allmem llm start $(LLM_ARGS)

llm-stop: ## Stop the local model's server
	$(VENV)/bin/allmem llm stop $(LLM_ARGS)

test-llm: $(LLM_STAMP) ## The real-model tier (pytest -m llm): every LLM role against the local server it starts
	$(PY) -m pytest -m llm

# `make table1-llm`: Table 1 with every LLM role from the local model, on the first LLM_SESSIONS sessions of the
# first LLM_CONVS LoCoMo conversations (the questions those sessions answer), into LLM_RUNS (resumable) and LLM_OUT;
# then the judge's sanity on naive_rag's answers and the per-role report. The default is what 2 cores finish in
# well under an hour; larger slices (LLM_CONVS=2, LLM_SESSIONS= for whole conversations) take hours there
# (docs/REPRODUCE.md, "A local LLM").
LLM_CONVS ?= 1
LLM_SESSIONS ?= 1
LLM_RUNS ?= results/runs/llm
LLM_OUT ?= results/llm
LLM_SET = llm=local dataset.limit_dialogues=$(LLM_CONVS) $(if $(LLM_SESSIONS),dataset.limit_sessions=$(LLM_SESSIONS)) $(LLM_ARGS)
table1-llm: llm-server ## Table 1 on LLM_SESSIONS (1) sessions of LLM_CONVS (1) LoCoMo conversations, every role from the local model
	$(VENV)/bin/allmem paper run --jobs 1 --runs $(LLM_RUNS) --set "$(LLM_SET)" table1
	$(VENV)/bin/allmem report --out $(LLM_OUT) --runs $(LLM_RUNS) --set "$(LLM_SET)" table1
	$(VENV)/bin/allmem judge "$$(ls -d $(LLM_RUNS)/locomo/naive_rag,* | head -1)" llm=local $(LLM_ARGS) --sanity
	$(VENV)/bin/allmem report llm --runs $(LLM_RUNS) --out $(LLM_OUT)

bench-llm: $(LLM_STAMP) ## The local model's prefill / decode tokens/s and requests/min, 1 server x 2 threads vs 2 x 1
	$(PY) scripts/bench_llm.py --out $(LLM_OUT)

reproduce: $(STAMP) ## Table 1 on the full LoCoMo (every method, offline backend), with its cost tables; prints it
	$(EXPERIMENTS) table1
	$(SUMMARISE) table1 table2 table3
	@cat $(OUT)/tables/table1.md

memgpt_window: mgw-data
mgw-data: $(STAMP)
	$(PY) scripts/make_longmemeval.py $(MGW_FILE) --questions $(MGW_QUESTIONS) --sessions $(MGW_SESSIONS)
$(PAPER_TARGETS): $(STAMP)
	$(EXPERIMENTS) $@
	$(SUMMARISE) $@

sweep: $(STAMP) ## Any Hydra multirun, e.g. make sweep NAME=K ARGS="method=allmem method.retrieval.K=4,8,16"
	@test -n "$(ARGS)" || { echo 'make sweep: give the sweep, e.g. ARGS="method=allmem method.retrieval.K=4,8,16"'; exit 2; }
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(VENV)/bin/allmem run -m $(ARGS) run.root=$(SWEEPS)/$(NAME) \
		'run.bank_cache=$${paths.cache_dir}/banks' run.progress=false hydra/launcher=local hydra.launcher.n_jobs=$(JOBS)
	$(VENV)/bin/allmem report sweep --runs $(SWEEPS)/$(NAME) --out $(OUT)/sweeps/$(NAME)

bench: $(STAMP) ## Mem-Lat: allmem vs allmem_hybrid on LoCoMo; exact vs approximate search and BM25 up to 10^6 units
	$(PY) scripts/bench_latency.py

# `make bench-scale`: LongMemEval-shaped haystacks, every Table 1 method, cold caches, one shared cache, and one shared cache
# on haystacks that repeat sessions as LongMemEval-s's file does; E of two shards; the projection. SCALE_FRACTION of
# LongMemEval-s's 500 questions, SCALE_SESSIONS sessions each (full size: 50); SCALE_ARGS e.g.
# "--embedders minilm minilm_torch minilm_onnx_int8 --methods naive_rag allmem".
SCALE_FRACTION ?= 0.006
SCALE_SESSIONS ?= 10
SCALE_ARGS ?=
bench-scale: $(STAMP) ## Time per turn of every Table 1 method on LongMemEval-shaped haystacks; workers, shards, projection
	$(PY) scripts/bench_scale.py --fraction $(SCALE_FRACTION) --sessions $(SCALE_SESSIONS) $(SCALE_ARGS)

site: $(STAMP) ## Static results site (opens from file://) from the runs under RUNS into results/site
	$(VENV)/bin/allmem report site --runs $(RUNS) --out results/site

chromium: ## Install Debian's chromium (root, apt) for the headless site test; nothing when one is on PATH
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

lint: $(STAMP) ## ruff check + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP) ## Apply ruff fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean: ## Remove run directories and caches (keeps .venv)
	rm -rf results/runs results/.hydra .cache .pytest_cache
