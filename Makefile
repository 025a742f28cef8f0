# The README's two commands: `make run` (set up, then the main job) and `make test` (set up, then the suite).
PYTHON ?= python3
# Every goal but clean needs Python 3.11+: stop at once with one line (make's own "Stop.") when it is older.
ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),default)),)
PY_FOUND := $(shell $(PYTHON) -c 'import sys; v = sys.version_info; print("%d.%d %s" % (v[0], v[1], v >= (3, 11)))' 2>/dev/null)
ifneq ($(word 2,$(PY_FOUND)),True)
$(error $(PYTHON) is $(if $(PY_FOUND),Python $(word 1,$(PY_FOUND)),not a working Python); this project needs Python 3.11 or later: make PYTHON=python3.11 $(MAKECMDGOALS))
endif
endif
VENV := .venv
BIN := $(VENV)/bin
MOE := $(BIN)/moe-lc
# Accept exit code 1 (the analysed configuration has error findings) but stop on 2 (bad input) and crashes.
OK1 := ; rc=$$?; [ $$rc -le 1 ] || exit $$rc

# DeepSeek-V3 at 128K on 256 H100: the seeds' layout TP1 CP32 EP32 PP8 VPP4 with its published knobs.
DSV3 := --model deepseek-v3 --gpu h100 --seq-len 131072
DSV3_LAYOUT := $(DSV3) --num-gpus 256 --tp 1 --cp 32 --ep 32 --pp 8 --vpp 4 --gbs 256 --mbs 1
# ... with the split Bridge's recipe uses, FP8 blockwise on Hopper, DeepEP, and the recipe's optimizer (precision-aware,
# BF16 moments and gradients) and TE cross entropy.
DSV3_RECIPE := $(DSV3_LAYOUT) --pipeline-layout 'Et|(tt|)*30mL' --dispatcher flex-deepep --precision fp8-blockwise \
	--cp-comm-type a2a+p2p --hierarchical-cp-sizes 8,4 \
	--use-precision-aware-optimizer --no-grad-reduce-in-fp32 --cross-entropy-fusion te

# Differential conformance suite: the engine against Megatron Core 0.19.2, Megatron-LM's training layer (shipped
# in the megatron-core wheel) and Megatron Bridge 0.6.2, run on the CPU. The environment lives under build/ and is
# built once: a venv with the CPU torch and what Megatron imports, and the two wheels downloaded from PyPI and
# unpacked (they require Python 3.12, so they are not pip-installed). MEGATRON_LM_SRC=/path uses another
# Megatron-LM source tree for megatron/training; MEGATRON_LM_SRC=none reports the Megatron-LM cases as not run.
CONF := build/conformance
CONF_PY := $(CONF)/venv/bin/python
CONF_PIP := $(CONF)/venv/bin/pip --quiet --disable-pip-version-check
MCORE_WHEEL := megatron-core==0.19.2
BRIDGE_WHEEL := megatron-bridge==0.6.2

# Evals: the reference agent (answers only through the MCP server) through the runner, with and without the skill.
# `make evals` rewrites BENCHMARK.md and evals/benchmark.json; CI runs `make evals-check`, the same command, which
# fails when the scores differ from the committed ones. The workspace (skill-creator's layout) goes to build/evals.
EVALS_RUN := moe-lc eval run --agent-cmd 'moe-lc eval reference-agent' --agent-name 'moe-lc eval reference-agent' --jobs 2 --out build/evals
# The recorded LLM run: the calibration answers (31 tasks, with and without the skill) beside the clone, graded next
# to the reference agent when the folder is there (CI and developers); without it the page shows the reference agent.
CALIBRATION := ../shared/evals-calibration
RECORDED := $(if $(wildcard $(CALIBRATION)/answers_with_A.jsonl),--recorded-name 'LLM agent (calibration set A)' \
	--recorded-date 2026-11-30 --recorded-with $(CALIBRATION)/answers_with_A.jsonl \
	--recorded-without $(CALIBRATION)/answers_without_A.jsonl)

.PHONY: run test fuzz check-node lint clean conformance corpus calibration-peer evals evals-check bench-check

$(VENV)/.run-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.run-installed

run: $(VENV)/.run-installed
	@echo "### 1. size_cp: which CP and cp_comm_type for 128K tokens of DeepSeek-V3 on H100?"
	$(MOE) size-cp $(DSV3) $(OK1)
	@echo; echo "### 2. plan_layout: ranked plans for DeepSeek-V3 at 128K on 256 H100 (report: build/plan.html)"
	@mkdir -p build
	$(MOE) plan $(DSV3) --num-gpus 256 --top-n 3 --report build/plan.html $(OK1)
	@echo; echo "### 3. lint_config: the top plan's Megatron-LM arguments, quoted as a launch script passes them"
	$(MOE) plan $(DSV3) --num-gpus 256 --top-n 1 --json \
		| $(BIN)/python -c "import json,shlex,sys; print(shlex.join(json.load(sys.stdin)['plans'][0]['megatron_args']))" \
		| $(MOE) lint --megatron-args - --model deepseek-v3 --gpu h100 --num-gpus 256 $(OK1)
	@echo; echo "### 4. estimate_memory: the published layout (TP1 CP32 EP32 PP8 VPP4) with its recompute and offload"
	$(MOE) estimate-memory $(DSV3_RECIPE) --recompute-granularity selective \
		--recompute-modules mla_up_proj,layernorm,moe,mlp --optimizer-cpu-offload-fraction 1 $(OK1)

PY_DIRS := tools tests scripts benchmarks conformance

test: $(VENV)/.dev-installed
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/pytest

# The fuzz suite (tests/test_server_fuzz.py: every tool through the Python API, the CLI and MCP in process and
# over stdio) with many more examples than the dozen per tool and face `make test` runs.
FUZZ_EXAMPLES ?= 400
fuzz: $(VENV)/.dev-installed
	MOE_LC_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q tests/test_server_fuzz.py

# Claude Code registration, MCP Inspector CLI and protocol conformance: npm packages cached under build/npm.
# Each check is skipped, and says why, without Node.js or the npm registry.
check-node: $(VENV)/.dev-installed
	$(BIN)/pytest -m node -rs -v

evals: $(VENV)/.dev-installed
	$(BIN)/moe-lc eval build --check
	@$(if $(RECORDED),,echo "$(CALIBRATION) not found: BENCHMARK.md shows the reference agent only")
	PATH="$(CURDIR)/$(BIN):$$PATH" $(EVALS_RUN) $(RECORDED)

evals-check: $(VENV)/.dev-installed
	$(BIN)/moe-lc eval build --check
	@$(if $(RECORDED),,echo "$(CALIBRATION) not found: the recorded run is not checked")
	PATH="$(CURDIR)/$(BIN):$$PATH" $(EVALS_RUN) $(RECORDED) --check-against evals/benchmark.json

# Speed: benchmark ratios (CPU over a reference measured in the same run) against benchmarks/baseline.json; fails
# when one is more than twice its baseline or a plan stops being optimal (about half a minute).
bench-check: $(VENV)/.dev-installed
	$(BIN)/python -m benchmarks.check

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check --fix $(PY_DIRS)
	$(BIN)/ruff format $(PY_DIRS)

$(CONF)/.ready: Makefile
	rm -rf $(CONF)/venv $(CONF)/dl $(CONF)/mcore $(CONF)/bridge
	$(PYTHON) -m venv $(CONF)/venv
	$(CONF_PIP) install torch==2.13.0 numpy 'packaging>=24.2' einops pydantic pyyaml
	$(CONF_PIP) install transformers==5.12.1 hydra-core==1.3.8 omegaconf==2.3.0
	$(CONF_PIP) download $(MCORE_WHEEL) $(BRIDGE_WHEEL) --no-deps --python-version 3.12 --only-binary=:all: -d $(CONF)/dl
	$(CONF_PY) -m zipfile -e $(CONF)/dl/megatron_core-*.whl $(CONF)/mcore
	$(CONF_PY) -m zipfile -e $(CONF)/dl/megatron_bridge-*.whl $(CONF)/bridge
	touch $@

conformance: $(CONF)/.ready
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.inventory_check --megatron $(CONF)/mcore --bridge $(CONF)/bridge --out $(CONF)
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.upstream_rules --megatron $(CONF)/mcore --bridge $(CONF)/bridge
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.run --megatron $(CONF)/mcore --bridge $(CONF)/bridge --out $(CONF)
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.corpus.run --megatron $(CONF)/mcore --bridge $(CONF)/bridge --out $(CONF)
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.corpus.peft_writeback --megatron $(CONF)/mcore --bridge $(CONF)/bridge
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.bridge_memory_peer --check --conformance $(CONF)

# Regenerate the corpus of upstream launches (conformance/corpus/data) and upstream's verdicts: the Bridge recipes
# from the wheel, the Megatron-LM functional tests and ModelZoo launches from git folders when given
# (MEGATRON_LM_REPO=<NVIDIA/Megatron-LM with core_r0.19.0> MODELZOO_REPO=<yanring/Megatron-MoE-ModelZoo>).
corpus: $(CONF)/.ready
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.corpus.build --megatron $(CONF)/mcore --bridge $(CONF)/bridge

# Megatron Bridge 0.6.2's own memory estimator on the calibration corpus's memory points (the README's and
# CALIBRATION.md's "Bridge estimator" column): rewrites tools/moe_long_context/evals/calibration/peer_bridge.yaml.
calibration-peer: $(CONF)/.ready
	PYTHONPATH=tools:. $(CONF_PY) -m conformance.bridge_memory_peer --conformance $(CONF)
	$(BIN)/moe-lc eval calibrate --write

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis
