"""Every Nemotron 3 Super / Ultra / 3.5 Lightning recipe function of Megatron Bridge 0.6.2 (issue 24), as the
function sets it (engine/recipes_nemotron3.yaml): it loads, passes every rule, gives the DP/EDP of its layout, and
fits, or does not fit for the reason its notes give and with the overrides Bridge's verification card runs it
with. plan_layout answers for its job with plans at least as fast, and for the long-context jobs of the issue."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.representative import nemotron3_recipes
from moe_long_context.engine.rules import run
from moe_long_context.engine.stated_error import stated_error
from moe_long_context.engine.step_time import step_time
from moe_long_context.evals.calibration.corpus import load_corpus
from moe_long_context.evals.calibration.evaluate import BANDS, evaluate_point
from moe_long_context.memory.rank_memory import memory_model
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from moe_long_context.tools.estimate_memory import (
    EstimateMemoryRequest,
    estimate_memory,
    estimate_memory_config,
)
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)

RECIPES = {lay.id: lay for lay in nemotron3_recipes()}

# Every public recipe function of the wheel for these models (recipes/nemotronh/{h100,gb200}/*.py __all__ and
# perf_recipes/nemotronh/__init__.py), by the function the test names; VR200's three are left out (no such GPU).
LIBRARY = {
    "nemotron_3_super_pretrain_16gpu_h100_bf16_config", "nemotron_3_super_sft_16gpu_h100_bf16_config",
    "nemotron_3_super_sft_16gpu_h100_bf16_32k_config", "nemotron_3_super_peft_1gpu_h100_bf16_config",
    "nemotron_3_super_peft_16gpu_h100_bf16_config", "nemotron_3_super_pretrain_64gpu_gb200_bf16_config",
    "_nemotron_3_super_pretrain_64gpu_h100_bf16_config",  # what nemotron_3_super_pretrain_config returns
    "nemotron_3_ultra_pretrain_24gpu_h100_bf16_config",
    "nemotron_3_ultra_sft_192gpu_h100_bf16_openmathinstruct2_packed_config",
    "nemotron_3_ultra_peft_32gpu_h100_bf16_openmathinstruct2_packed_config",
    "nemotron_3_5_lightning_pretrain_config", "nemotron_3_5_lightning_sft_config", "nemotron_3_5_lightning_peft_config",
    "nemotron_3_5_lightning_sft_openmathinstruct2_packed_config", "nemotron_3_5_lightning_pretrain_8k_config",
    "nemotron_3_5_lightning_pretrain_8k_fsdp_config", "nemotron_3_5_lightning_sft_openmathinstruct2_packed_tp1_config",
}  # fmt: skip
PERF = (
    {f"nemotron_3_super_pretrain_64gpu_{g}_{p}_config" for g in ("b200", "b300", "gb200", "gb300")
     for p in ("bf16", "fp8mx", "nvfp4")}
    | {"nemotron_3_super_pretrain_64gpu_h100_bf16_config"}
    | {f"nemotron_3_ultra_pretrain_256gpu_{g}_{p}_config" for g in ("gb200", "gb300") for p in ("fp8mx", "nvfp4")}
    | {f"nemotron_3_5_lightning_pretrain_8gpu_{g}_{p}_config" for g in ("b200", "b300", "gb200", "gb300")
       for p in ("bf16", "fp8mx", "nvfp4")}
    | {f"nemotron_3_5_lightning_pretrain_8gpu_{g}_fp8mx_fsdp_config" for g in ("gb200", "gb300")}
    | {"nemotron_3_5_lightning_pretrain_16gpu_h100_bf16_config", "nemotron_3_5_lightning_pretrain_16gpu_h100_fp8cs_config"}
)  # fmt: skip
ALIASES = {  # legacy names the wheel exports for some of them (recipes/nemotronh/nemotron_3_{super,ultra}.py)
    "nemotron_3_super_pretrain_config", "nemotron_3_super_sft_config", "nemotron_3_super_peft_config",
    "nemotron_3_ultra_pretrain_config", "nemotron_3_ultra_sft_openmathinstruct2_packed_config",
    "nemotron_3_ultra_peft_openmathinstruct2_packed_config",
}  # fmt: skip


def function_of(lay) -> str:
    """The recipe function a layout's source names (megatron-bridge 0.6.2 <path>:<line> <function>)."""
    return lay.source.split()[3].rstrip(";")


def test_every_recipe_function_is_checked_once():
    library = {function_of(lay) for lay in RECIPES.values() if "/perf_recipes/" not in lay.source}
    perf = {function_of(lay) for lay in RECIPES.values() if "/perf_recipes/" in lay.source}
    assert (library, perf) == (LIBRARY, PERF)
    assert len(RECIPES) == len(LIBRARY) + len(PERF) == 50
    exported = " ".join(lay.source for lay in RECIPES.values())
    assert all(f"exported as {alias} " in exported for alias in ALIASES)
    for lay in RECIPES.values():
        path = lay.source.split()[2]
        assert path.startswith("megatron/bridge/") and ".py:" in path, lay.source


def request(model, config):
    return model(**{k: v for k, v in config.items() if k in model.model_fields})


@pytest.mark.parametrize("rid", sorted(RECIPES), ids=lambda rid: function_of(RECIPES[rid]))
def test_recipe_passes_every_rule_with_its_layout(rid):
    lay = RECIPES[rid]
    config = lay.config
    ctx = build_context(TrainingConfig(**config))
    errors = [f"{f.code}: {f.message}" for f in run(ctx) if f.severity is Severity.error]
    assert errors == lay.expect.errors == []
    budget = check_dp_budget(request(CheckDpBudgetRequest, config))
    assert (budget.dp, budget.edp) == (lay.expect.dp, lay.expect.edp)
    assert budget.num_microbatches >= config["pp"] or "microbatches" in " ".join(lay.chosen)
    assert not [f for f in validate_cuda_graph_shapes(request(ValidateCudaGraphsRequest, config)).findings
                if f.severity is Severity.error]  # fmt: skip
    # the layout the recipe sets is the one the engine resolves
    assert (ctx.cfg.tp, ctx.cfg.cp, ctx.cfg.pp, ctx.cfg.ep, ctx.etp, ctx.vpp) == (
        config["tp"], config["cp"], config["pp"], config["ep"], config["etp"], config.get("vpp"))  # fmt: skip
    assert ctx.mtp_layers == config["mtp_num_layers"] == 2  # every one runs the repeated MTP block twice
    assert f"{config['num_gpus']} {config['gpu'].upper()}" in lay.title


# The 16-H100 Lightning recipe measured 70.2 GiB reserved (card :681-700) and the engine estimates 70.4: the memory
# outside PyTorch on H100 is bounded by that same run (usable - reserved, memory/overhead.yaml), so its verdict is a
# coin toss at the card's edge: over by 0.2 GiB of 79.1, inside the stated error.
AT_THE_EDGE = {"perf-nemotron-3-5-lightning-pretrain-16gpu-h100-bf16"}


@pytest.mark.parametrize("rid", sorted(RECIPES), ids=lambda rid: function_of(RECIPES[rid]))
def test_recipe_fits_or_says_why_not(rid):
    lay = RECIPES[rid]
    memory = estimate_memory_config(TrainingConfig(**lay.config))  # the whole recipe: LoRA included
    assert memory.valid, rid
    if rid in AT_THE_EDGE:  # ran, and the estimate sits over the card by less than its stated error
        assert not memory.fits and -memory.headroom_gib < memory.stated_error * memory.peak_gib, (
            memory.peak_gib
        )
        return
    assert memory.fits is lay.expect.fits, (rid, memory.peak_gib)
    if not lay.expect.fits:
        assert any("not fit" in note for note in lay.chosen), lay.chosen


FULL = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
# The runs Bridge r0.6.0 examples/model_verification_cards/nemotron-3-super-120b-a12b/card.yaml gives the 16-GPU
# recipes (their commands add full recompute and optimizer CPU offload): each fits where the recipe does not.
CARD_RUNS = [
    ("nemotron-3-super-sft-16gpu-h100-bf16-32k", dict(FULL, optimizer_cpu_offload=True,
                                                      optimizer_cpu_offload_fraction=1.0)),  # :388-435, verified
    ("nemotron-3-super-sft-16gpu-h100-bf16", dict(FULL, seq_len=8192, optimizer_cpu_offload=True,
                                                  optimizer_cpu_offload_fraction=0.75)),  # :237-283
    ("nemotron-3-super-pretrain-16gpu-h100-bf16", dict(FULL, gpu="gb200", seq_len=4096, cuda_graph_impl="none",
                                                       cuda_graph_modules=None, optimizer_cpu_offload=True,
                                                       optimizer_cpu_offload_fraction=0.4)),  # :195-235
]  # fmt: skip


@pytest.mark.parametrize(("rid", "overrides"), CARD_RUNS, ids=[r for r, _ in CARD_RUNS])
def test_the_verification_cards_overrides_make_the_16_gpu_recipes_fit(rid, overrides):
    lay = RECIPES[rid]
    assert not lay.expect.fits
    memory = estimate_memory(request(EstimateMemoryRequest, {**lay.config, **overrides}))
    assert memory.valid and memory.fits, memory.peak_gib
    assert not [f for f in memory.findings if f.severity is Severity.error]


def _jobs():
    """One job per (model, GPU, GPU count, length, batch, LoRA or not) of the recipes that fit; a PEFT recipe's
    job is planned with its LoRA rank and targets."""
    jobs = {}
    for lay in RECIPES.values():
        c = lay.config
        if lay.expect.fits:
            lora = c.get("peft", "none") == "lora"
            jobs.setdefault((c["model"], c["gpu"], c["num_gpus"], c["seq_len"], c["gbs"], lora), lay)
    return jobs


def _lora_of(config: dict) -> dict:
    if config.get("peft", "none") != "lora":
        return {}
    # the recipe's BF16: under the planner's default FP8 the frozen base also keeps its quantized copies
    return {"lora_dim": config.get("lora_dim", 32), "lora_target_modules": config["lora_target_modules"],
            "precision": config["precision"]}  # fmt: skip


JOBS = _jobs()


@pytest.mark.parametrize("job", sorted(JOBS), ids=lambda j: function_of(JOBS[j]))
def test_plan_layout_answers_each_recipes_job_at_least_as_fast(job):
    """The recipe's own layout is among the plans, or the top plan is not slower than it beyond the step-time
    model's stated error (at the recipe's global batch)."""
    lay = JOBS[job]
    model, gpu, num_gpus, seq_len, gbs, lora = job
    plans = plan_layout(
        PlanLayoutRequest(
            model=model, gpu=gpu, num_gpus=num_gpus, seq_len=seq_len, gbs=gbs, **_lora_of(lay.config)
        )
    )
    assert plans.valid and plans.plans, plans.no_plan_reason
    assert all(("lora_dim" in p.settings) is lora for p in plans.plans)
    recipe = step_time(build_context(TrainingConfig(**lay.config)))
    layouts = {tuple(p.settings.get(k, 1) for k in ("tp", "cp", "pp", "ep")) for p in plans.plans}
    c = lay.config
    own = (c["tp"], c["cp"], c["pp"], c["ep"]) in layouts
    top = plans.plans[0].throughput.tokens_per_s
    tie = stated_error("throughput", build_context(TrainingConfig(**lay.config)).model.family)
    assert own or top >= recipe.tokens_per_step / recipe.step_s * (1 - tie), (top, layouts)


@pytest.mark.parametrize(
    ("model", "gpu", "num_gpus"),
    [("nemotron-3-super", "h100", 64), ("nemotron-3-super", "gb200", 72), ("nemotron-3-ultra", "gb200", 256)],
)
def test_plan_layout_answers_at_128k(model, gpu, num_gpus):
    plans = plan_layout(PlanLayoutRequest(model=model, gpu=gpu, num_gpus=num_gpus, seq_len=131072))
    assert plans.valid and plans.plans, plans.no_plan_reason
    job = dict(model=model, gpu=gpu, num_gpus=num_gpus, seq_len=131072)
    for plan in plans.plans:  # each plan passes every rule again and fits, as estimate_memory reads it
        assert plan.memory.peak_gib <= plan.memory.usable_gib
        cfg = {**job, **plan.settings}
        assert not [f for f in run(build_context(TrainingConfig(**cfg))) if f.severity is Severity.error]
        assert estimate_memory(request(EstimateMemoryRequest, cfg)).fits


# Peak allocated memory Bridge r0.6.0's verification cards measured for these recipes, in the GB (1e9 bytes) Bridge's
# memory report prints (training/utils/train_utils.py:1287-1294), under GiB labels. Each run is a point of
# the calibration corpus with the recipe's own settings, compared there with the engine's allocated level (its
# tensors; the reserved and device levels add the measured overhead): in band, or listed with what is known.
MEASURED = [
    ("nemotron-3-super-pretrain", "card-nemotron-3-super-pretrain-h100-64", 58.079),  # card.yaml:151-192
    ("nemotron-3-5-lightning-pretrain", "card-nemotron-3.5-lightning-pretrain-h100-16", 68.547),  # :150-192
    (
        "nemotron-3-5-lightning-pretrain-8k",
        "card-nemotron-3.5-lightning-pretrain-gb200-8",
        158.220,
    ),  # :193-232
]


@pytest.mark.parametrize(("rid", "point", "measured"), MEASURED, ids=[r for r, _, _ in MEASURED])
def test_memory_against_the_verification_cards(rid, point, measured):
    corpus = load_corpus()
    card = next(p for p in corpus.points if p.id == point)
    assert card.measured.peak_allocated_gib == pytest.approx(measured * 1e9 / 2**30, abs=1e-3)
    for key, value in card.config.items():  # the calibration point runs the recipe's own settings
        assert RECIPES[rid].config.get(key, value) == value, key
    allocated = memory_model(build_context(TrainingConfig(**RECIPES[rid].config))).peak_rank.allocated / 2**30
    row = next(r for r in evaluate_point(corpus, card) if r.quantity == "allocated")
    assert row.estimate == pytest.approx(allocated, rel=0.01)
    low, high = BANDS["memory"]
    assert low <= allocated / measured <= high or (row.listing and row.listing.reason == "unexplained"), (
        allocated
    )


def test_the_fine_tuning_recipes_with_cp_set_the_per_token_loss_bridge_asserts():
    """The 32K Super SFT recipe runs CP 2 and sets model.calculate_per_token_loss (recipes/nemotronh/h100/
    nemotron_3_super.py:381-388): the engine reads it and raises nothing; without it, lint would warn."""
    lay = RECIPES["nemotron-3-super-sft-16gpu-h100-bf16-32k"]
    assert lay.config["cp"] == 2 and lay.config["calculate_per_token_loss"] is True
    for rid, recipe in RECIPES.items():
        codes = {f.code for f in run(build_context(TrainingConfig(**recipe.config)))}
        assert not {c for c in codes if c.startswith("FINETUNE")}, rid
    unset = {k: v for k, v in lay.config.items() if k != "calculate_per_token_loss"}
    assert "FINETUNE_CP_PER_TOKEN_LOSS_UNSEEN" in {
        f.code for f in run(build_context(TrainingConfig(**unset)))
    }
