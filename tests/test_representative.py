"""Representative layouts (engine/layouts.yaml): each passes the engine with the DP/EDP it states."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import RECOMPUTE_MODULES
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.representative import recipe_layouts, representative_layouts
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)
from seed_layouts import DSV3_128K, DSV3_256K, DSV3_SPLIT, QWEN_128K, QWEN_SPLIT

CASES = [(lay, config) for lay in representative_layouts() for config in lay.configs()]
IDS = [f"{lay.id}-{i}" for lay in representative_layouts() for i, _ in enumerate(lay.configs())]
RECIPES = [(lay, config) for lay in recipe_layouts() for config in lay.configs()]
RECIPE_IDS = [f"{lay.id}-{i}" for lay in recipe_layouts() for i, _ in enumerate(lay.configs())]


def request(model, config):
    return model(**{k: v for k, v in config.items() if k in model.model_fields})


def errors(result):
    return [f"{f.code}: {f.message}" for f in result.findings if f.severity is Severity.error]


SEEDS = ["deepseek-v3-128k-h100", "deepseek-v3-256k-h100", "qwen3-235b-a22b-128k-gb200"]
# Megatron Bridge 0.6.2's own recipes for the sparse-attention and Mamba-hybrid models (issue 16)
BRIDGE_RECIPES = ["glm-5.2-128k-gb200", "glm-5.2-128k-h100", "glm-5.2-200k-h100", "nemotron-3-nano-4k-gb200"]


def test_the_three_seed_layouts():
    ids = [lay.id for lay in representative_layouts()]
    assert ids[:3] == SEEDS
    assert all("nemo-mbridge-perf-moe-long-context" in lay.source for lay in representative_layouts()[:3])
    assert set(BRIDGE_RECIPES) <= set(ids)


def test_bridge_recipe_layouts_cite_their_recipe():
    for lay in representative_layouts():
        if lay.id in BRIDGE_RECIPES:
            assert lay.source.startswith("Megatron Bridge 0.6.2 ") and ".py:" in lay.source


def test_seed_shapes_in_the_tests_are_the_published_ones():
    """tests/seed_layouts.py (the hand-checked tests' shapes) says what engine/layouts.yaml says."""
    published = {lay.id: lay.config for lay in representative_layouts()}
    for shape, split, layout_id in (
        (DSV3_128K, DSV3_SPLIT, "deepseek-v3-128k-h100"),
        (DSV3_256K, DSV3_SPLIT, "deepseek-v3-256k-h100"),
        (QWEN_128K, QWEN_SPLIT, "qwen3-235b-a22b-128k-gb200"),
    ):
        config = published[layout_id]
        assert {k: config.get(k, False) for k in {**shape, **split}} == {**shape, **split}, layout_id


@pytest.mark.parametrize(("layout", "config"), CASES, ids=IDS)
def test_layout_passes_check_dp_budget_with_the_stated_dp_and_edp(layout, config):
    result = check_dp_budget(request(CheckDpBudgetRequest, config))
    assert errors(result) == []
    assert (result.dp, result.edp) == (layout.expect.dp, layout.expect.edp)
    if layout.id != "glm-5.2-200k-h100":  # that recipe runs 13 microbatches through 19 stages
        assert result.num_microbatches >= config["pp"]  # the global batch fills the pipeline
    assert f"{config['num_gpus']} {config['gpu'].upper()}" in layout.title


@pytest.mark.parametrize(("layout", "config"), CASES, ids=IDS)
def test_layout_recompute_and_cuda_graphs_are_legal(layout, config):
    assert set(config.get("recompute_modules", ())) <= set(RECOMPUTE_MODULES)
    assert errors(validate_cuda_graph_shapes(request(ValidateCudaGraphsRequest, config))) == []


def test_the_bridge_recipe_layouts():
    """Bridge 0.6.2's recipes for the issue-15 families, each named by its recipe function."""
    assert {lay.config["model"] for lay in recipe_layouts()} == {
        "glm-4.5", "glm-4.5-air", "deepseek-v2", "deepseek-v2-lite", "olmoe-1b-7b", "qwen3.5-35b-a3b",
        "gemma-4-26b-a4b", "step-3.5-flash", "k-exaone-236b-a23b", "qwen3.5-397b-a17b",
    }  # fmt: skip
    for lay in recipe_layouts():
        assert (
            lay.source.startswith("megatron-bridge 0.6.2 megatron/bridge/recipes/")
            and "_config" in lay.source
        )


def codes(result):
    return sorted({f.code for f in result.findings if f.severity is Severity.error})


@pytest.mark.parametrize(("layout", "config"), RECIPES, ids=RECIPE_IDS)
def test_recipe_layout_gives_its_dp_and_edp_and_exactly_the_stated_errors(layout, config):
    result = check_dp_budget(request(CheckDpBudgetRequest, config))
    assert codes(result) == sorted(layout.expect.errors)
    assert (result.dp, result.edp) == (layout.expect.dp, layout.expect.edp)
    # fewer microbatches than stages is legal but mostly bubble: the recipe's notes must say so
    assert result.num_microbatches >= config["pp"] or "microbatches" in " ".join(layout.chosen)
    assert f"{config['num_gpus']} {config['gpu'].upper()}" in layout.title
    if layout.expect.errors:  # a recipe that does not build says why in its notes
        assert any("Megatron Core" in note for note in layout.chosen)


@pytest.mark.parametrize(("layout", "config"), RECIPES, ids=RECIPE_IDS)
def test_recipe_layout_recompute_cuda_graphs_and_memory(layout, config):
    assert set(config.get("recompute_modules", ())) <= set(RECOMPUTE_MODULES)
    graphs = codes(validate_cuda_graph_shapes(request(ValidateCudaGraphsRequest, config)))
    assert set(graphs) <= set(layout.expect.errors)
    if not layout.expect.errors:
        memory = estimate_memory(request(EstimateMemoryRequest, config))
        # a shipped recipe fits, or the estimate is over the GPU by less than its own stated error (K-EXAONE on
        # 64 H100: 72.3 GiB of tensors, EDP 1, plus the measured allocator cache and memory outside PyTorch)
        over = memory.peak_gib / memory.usable_gib - 1
        assert memory.valid and (memory.fits or over < memory.stated_error), (layout.id, memory.peak_gib)
