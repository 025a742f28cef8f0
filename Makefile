# The README's two commands: `make run` (set up, then the main job) and `make test` (set up, then the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MOE := $(BIN)/moe-lc
# Accept exit code 1 (the analysed configuration has error findings) but stop on 2 (bad input) and crashes.
OK1 := ; rc=$$?; [ $$rc -le 1 ] || exit $$rc

# DeepSeek-V3 at 128K on 256 H100: the seeds' layout TP1 CP32 EP32 PP8 VPP4 with its published knobs.
DSV3 := --model deepseek-v3 --gpu h100 --seq-len 131072
DSV3_LAYOUT := $(DSV3) --num-gpus 256 --tp 1 --cp 32 --ep 32 --pp 8 --vpp 4 --gbs 256 --mbs 1

.PHONY: run test check-node lint clean

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
	@echo "### 1. size_cp: which CP for 128K tokens on H100?"
	$(MOE) size-cp $(DSV3) $(OK1)
	@echo; echo "### 2. check_dp_budget: the seeds' layout, plain pipeline split (61 layers do not split over PP8 x VPP4)"
	$(MOE) check-dp-budget $(DSV3_LAYOUT) $(OK1)
	@echo; echo "### 3. check_dp_budget: the same layout with the split the engine proposes"
	$(MOE) check-dp-budget $(DSV3_LAYOUT) --pipeline-layout 'Et|(tt|)*30mL' $(OK1)
	@echo; echo "### 4. validate_cuda_graph_shapes: TE-scoped graphs with the seeds' recompute (moe recompute vs moe_router)"
	$(MOE) validate-cuda-graphs $(DSV3_LAYOUT) --dispatcher flex-deepep \
		--precision fp8-blockwise --recompute-granularity selective --recompute-modules mla_up_proj,layernorm,moe,mlp \
		--cuda-graph-impl transformer_engine --cuda-graph-modules attn,moe_router,moe_preprocess $(OK1)

PY_DIRS := tools tests scripts benchmarks

test: $(VENV)/.dev-installed
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/pytest

# Claude Code registration, MCP Inspector CLI and protocol conformance: npm packages cached under build/npm.
# Each check is skipped, and says why, without Node.js or the npm registry.
check-node: $(VENV)/.dev-installed
	$(BIN)/pytest -m node -rs -v

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check --fix $(PY_DIRS)
	$(BIN)/ruff format $(PY_DIRS)

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis
