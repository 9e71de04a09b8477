# allmem: every table and figure is a make target. `make help` lists them.
SHELL := /bin/bash
PY_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM := false

# Methods run by `make reproduce` on the full LoCoMo (offline backend); the slowest first, so that the last
# jobs of the parallel sweep are short ones (the tables sort rows themselves).
METHODS ?= amem,hipporag,mem0,lightmem,memgpt,allmem,allmem_hybrid,allmem_noatc,naive_rag,hybrid_rag,full_history,bm25,bm25_okapi
# All-Mem (no consolidation) with the other Stage 1 scorers, next to BM25 and Naive RAG.
STAGE1 ?= stage1_bm25,stage1_hybrid
REPRO_DIR ?= results/runs/reproduce
# `make reproduce` runs naive_rag alone first: it embeds every turn and question into the shared embedding cache
# (.cache/embeddings), so the methods after it, JOBS at a time (hydra-joblib-launcher, one torch thread each), never
# embed the same text twice. JOBS=1 runs them one after another.
WARM ?= naive_rag
JOBS ?= 2
PARALLEL := hydra/launcher=joblib hydra.launcher.n_jobs=$(JOBS)
# torch's CPU build (the CUDA build that plain PyPI serves is several GB): pip looks in TORCH_INDEX too, and
# the CPU wheels there (2.13.0+cpu) win. Where pip already finds a local CPU wheel, the index may be unreachable:
# one quick warning. TORCH_INDEX= (empty) installs whatever PyPI serves, e.g. for a CUDA machine.
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: help setup test test-fast reproduce lint format table clean bench

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PY_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --retries 0 "$(TORCH)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP) ## Create .venv and install torch (CPU build; TORCH_INDEX= for PyPI's) then allmem; idempotent

test: $(STAMP) ## Run the whole test suite (offline; what CI runs)
	$(PY) -m pytest tests

test-fast: $(STAMP) ## The suite without the tests marked slow (real LoCoMo, real embedding model)
	$(PY) -m pytest tests -m "not slow"

reproduce: $(STAMP) ## Run every method on the full LoCoMo (offline backend) and print the results tables
	$(VENV)/bin/allmem run dataset=locomo method=$(WARM) run.root=$(REPRO_DIR)
	$(VENV)/bin/allmem run -m dataset=locomo method=$(METHODS) run.root=$(REPRO_DIR) $(PARALLEL)
	$(VENV)/bin/allmem run -m dataset=locomo +experiment=$(STAGE1) run.root=$(REPRO_DIR) $(PARALLEL)
	$(VENV)/bin/allmem report $(REPRO_DIR) --out results/tables/locomo_offline.md --figures results/figures

bench: $(STAMP) ## Mem-Lat: allmem vs allmem_hybrid on LoCoMo; exact vs approximate search and BM25 up to 10^6 units
	$(PY) scripts/bench_latency.py

lint: $(STAMP) ## ruff check + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP) ## Apply ruff fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean: ## Remove run directories and caches (keeps .venv)
	rm -rf results/runs results/.hydra .cache .pytest_cache
