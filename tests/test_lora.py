"""Bridge's LoRA (cfg.peft) in the engine: the adapters it places, what the frozen base keeps, the step it runs, the
rule it must pass and how lint reads it. Values are worked by hand from Nemotron 3 Super's shapes (hidden 4096; Mamba
128 heads x 64, 8 groups x 128 state; 32 query heads / 2 KV groups of 128; shared expert 5376, routed experts
1024 -> 2688 latent, top-22; 40 Mamba, 8 attention and 40 MoE layers, MTP block "*E")."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.representative import nemotron3_recipes
from moe_long_context.engine.rules import run
from moe_long_context.engine.step_time import step_time
from moe_long_context.memory.activations import shard_of
from moe_long_context.memory.hybrid_layers import lora_inventory
from moe_long_context.memory.rank_memory import memory_model
from moe_long_context.model.catalog import load_model
from moe_long_context.model.lora import layer_adapters, mtp_adapters
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config

SIX = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "in_proj", "out_proj")
SUPER_PEFT_16 = dict(
    model="nemotron-3-super", gpu="h100", num_gpus=16, seq_len=2048, tp=8, ep=16, etp=1, sequence_parallel=True,
    mbs=1, gbs=16, mtp_num_layers=2, packed_sequences=True, peft="lora", lora_target_modules=SIX,
)  # fmt: skip


def _params(adapters, tp=1, etp=1, dim=32):
    return sum(a.params_per_rank(dim, tp, etp) for a in adapters)


def test_super_adapters_per_layer_kind():
    m = load_model("nemotron-3-super")
    mamba = layer_adapters(m, "mamba", False, SIX)
    assert [(a.target, a.in_features, a.out_features, a.kind) for a in mamba] == [
        ("in_proj", 4096, 2 * 8192 + 2 * 8 * 128 + 128, "column_ln"),  # z, x, B, C, dt
        ("out_proj", 8192, 4096, "row"),
    ]
    assert _params(mamba) == 32 * (4096 + 18560) + 32 * (8192 + 4096) == 1_118_208
    attention = layer_adapters(m, "full", False, SIX)
    assert [(a.target, a.out_features) for a in attention] == [
        ("linear_qkv", 32 * 128 + 2 * 2 * 128),
        ("linear_proj", 4096),
    ]
    moe = layer_adapters(m, "none", True, SIX)
    assert [(a.target, a.in_features, a.out_features, a.kind) for a in moe] == [
        ("linear_fc1", 4096, 5376, "column"), ("linear_fc1", 1024, 2688, "expert"),
        ("linear_fc2", 5376, 4096, "row"), ("linear_fc2", 2688, 1024, "expert"),
    ]  # fmt: skip
    # the default targets leave the Mamba mixers alone
    assert layer_adapters(m, "mamba", False, ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")) == ()


def test_super_adapter_count_matches_the_verification_cards_checkpoint():
    """Bridge r0.6.0's card (nemotron-3-super-120b-a12b/card.yaml:540-548) counts 82,304 LoRA tensors in the exported
    adapter. In Hugging Face names each adapter is an A and a B tensor, linear_qkv splits into q/k/v (three of
    each) and the shared grouped-expert adapter is written once per expert: 40 Mamba x 2 x 2 + 8 attention x (6 + 2)
    + 40 MoE x (512 experts x 2 x 2 + shared 2 x 2). The decoder layers' adapters are those."""
    m = load_model("nemotron-3-super")
    per_kind = {}
    for t, moe in zip(m.attention_layer_types, m.moe_layers, strict=True):
        per_kind[(t, moe)] = per_kind.get((t, moe), 0) + 1
    assert per_kind == {("mamba", False): 40, ("full", False): 8, ("none", True): 40}
    tensors = 0
    for (t, moe), n in per_kind.items():
        for a in layer_adapters(m, t, moe, SIX):
            tensors += n * {"linear_qkv": 6}.get(a.target, 2) * (m.num_experts if a.kind == "expert" else 1)
    assert tensors == 82_304


def test_super_peft_16_static_memory_by_hand():
    ctx = build_context(TrainingConfig(**SUPER_PEFT_16))
    rank = memory_model(ctx).peak_rank
    terms = {t.name: t.bytes for t in rank.terms}
    dense = (40 * 1_118_208 + 8 * 540_672 + 40 * 606_208) + (540_672 + 606_208)  # decoder + the one MTP block
    experts = 40 * 237_568 + 237_568  # one adapter per EP rank and layer, whole at ETP 1
    assert terms["gradients"] == 4 * (
        dense / 8 + experts
    )  # FP32 main grads (the recipe's grad_reduce_in_fp32)
    assert terms["optimizer states"] == 12 * (
        dense / 8 / 2 + experts / 1
    )  # DP 2 for dense, EDP 1 for experts
    full = memory_model(build_context(TrainingConfig(**{**SUPER_PEFT_16, "peft": "none"}))).peak_rank
    base = {t.name: t.bytes for t in full.terms}["parameters"]
    assert terms["parameters"] == base + 2 * (dense / 8 + experts)  # frozen BF16 weights plus the adapters
    assert rank.total < 0.25 * full.total


def test_lora_saved_tensors_by_hand():
    """TP 8 with sequence parallelism: each column adapter keeps its input gathered over the 8 ranks (7 shards more
    than the frozen base would), and every adapter its rank-32 intermediate."""
    ctx = build_context(TrainingConfig(**SUPER_PEFT_16))
    sh = shard_of(ctx)
    gathered = 2 * 4096 * (2048 - 256)
    mamba = {s.name: s.bytes for s in lora_inventory(ctx, sh, "mamba", False)}
    assert mamba == {
        "LoRA: gathered inputs of column-parallel adapters (other TP shards)": gathered,
        "LoRA: rank-dim intermediates": 2 * (2 * 32 * 2048),
    }
    moe = {(s.name, s.removed_by): s.bytes for s in lora_inventory(ctx, sh, "none", True)}
    shared = frozenset({"moe", "shared_experts"})
    assert moe[("LoRA: gathered inputs of column-parallel adapters (other TP shards)", shared)] == gathered
    assert moe[("LoRA: rank-dim intermediates", shared)] == 2 * (2 * 32 * 2048)
    assert moe[("LoRA: rank-dim intermediates", frozenset({"moe"}))] == 2 * (
        2 * 32 * 22 * 256
    )  # routed copies
    no_sp = build_context(TrainingConfig(**{**SUPER_PEFT_16, "tp": 1, "ep": 16, "sequence_parallel": False}))
    names = {s.name for s in lora_inventory(no_sp, shard_of(no_sp), "mamba", False)}
    assert names == {"LoRA: rank-dim intermediates"}  # no SP: the base's own input was whole already


def test_lora_step_runs_two_gemm_passes_and_the_adapters_traffic():
    lora = step_time(build_context(TrainingConfig(**SUPER_PEFT_16)))
    full = step_time(build_context(TrainingConfig(**{**SUPER_PEFT_16, "peft": "none"})))
    for key in (("mamba", False), ("full", False), ("none", True)):
        assert lora.layer_terms[key]["gemm"] == pytest.approx(
            full.layer_terms[key]["gemm"] * 2 / 3, rel=1e-12
        )
        core = "mamba_scan" if key[0] == "mamba" else "attention"
        assert lora.layer_terms[key][core] == full.layer_terms[key][core]
        assert "lora" not in full.layer_terms[key]
    ctx = build_context(TrainingConfig(**SUPER_PEFT_16))
    per_token = 6 * (4096 + 18560 / 8) + 6 * (8192 / 8 + 4096)  # column in_proj, row out_proj
    assert lora.layer_terms[("mamba", False)]["lora"] == pytest.approx(
        per_token * 2048 / (ctx.gpu.hbm_bandwidth_tbps * 1e12), rel=1e-12
    )
    assert lora.terms["optimizer"] < full.terms["optimizer"] / 100  # only the adapters step
    assert lora.model_flops_per_step == full.model_flops_per_step  # Bridge counts LoRA's model FLOPs as full


def test_mtp_block_adapters_are_its_inner_layers():
    m = load_model("nemotron-3-super")
    assert [a.target for a in mtp_adapters(m, SIX)] == [
        "linear_qkv", "linear_proj", "linear_fc1", "linear_fc1", "linear_fc2", "linear_fc2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "fires"),
    [
        (dict(lora_dim=32), []),
        (dict(lora_dim=20), ["TP=8"]),
        (
            dict(lora_dim=20, lora_target_modules=("linear_proj", "out_proj", "linear_fc2")),
            [],
        ),  # row bases only
        (dict(lora_dim=36, tp=4, ep=4, etp=8, num_gpus=64), ["ETP=8"]),  # 36 % 4 == 0, 36 % 8 != 0
    ],
)
def test_lora_rank_must_divide_the_column_adapters_split(changes, fires):
    cfg = {**SUPER_PEFT_16, "num_gpus": 64, "ep": 8, **changes}
    found = [f for f in run(build_context(TrainingConfig(**cfg))) if f.code == "LORA_DIM_TP"]
    assert [f.severity for f in found] == [Severity.error] * len(fires)
    for f, size in zip(found, fires, strict=True):
        assert size in f.message and "peft.dim" in f.fix


def test_unknown_target_is_refused_by_name():
    with pytest.raises(
        ValueError, match="lora_target_modules \\['q_proj'\\] not modelled: allowed module names"
    ):
        TrainingConfig(**{**SUPER_PEFT_16, "lora_target_modules": ["q_proj"]})


OVERRIDES = [
    "model.tensor_model_parallel_size=8", "model.expert_model_parallel_size=16", "model.sequence_parallel=true",
    "model.seq_length=2048", "dataset.seq_length=2048", "train.global_batch_size=16", "++peft.dim=32",
    "++peft.alpha=32", "++peft.target_modules=[linear_qkv,linear_proj,linear_fc1,linear_fc2,in_proj,out_proj]",
]  # fmt: skip


def _lint(overrides):
    return lint_config(
        LintConfigRequest(bridge_overrides=overrides, model="nemotron-3-super", gpu="h100", num_gpus=16)
    )


def test_lint_reads_a_peft_recipes_overrides_as_lora():
    r = _lint(OVERRIDES)
    assert r.effective_config["peft"] == "lora" and r.effective_config["lora_dim"] == 32
    codes = [f.code for f in r.findings]
    assert "BRIDGE_UNKNOWN_KEY" not in codes  # LoRA's own fields are keys of a PEFT recipe's cfg.peft
    assert "LORA_MODELLED" in codes
    assert [n.keys for n in r.not_checked] == [["peft.alpha"]]
    assert r.corrected_memory.fits and r.corrected_memory.peak_gib < 40
    full = _lint(OVERRIDES[:6])
    assert not full.corrected_memory.fits  # the same layout trained in full does not fit


def test_lint_leaves_other_peft_schemes_unread():
    r = _lint([*OVERRIDES[:6], "++peft._target_=megatron.bridge.peft.dora.DoRA", "++peft.dim=16"])
    assert r.effective_config.get("peft", "none") == "none"
    assert any("DoRA not modelled" in " ".join(n.keys) + (n.requires or "") for n in r.not_checked), (
        r.not_checked
    )
    unknown = _lint([*OVERRIDES[:6], "peft.rank=16"])
    assert "BRIDGE_UNKNOWN_KEY" in [f.code for f in unknown.findings]


def test_every_peft_recipe_carries_lora_on_the_six_targets():
    peft = [lay for lay in nemotron3_recipes() if "_peft_" in lay.source]
    assert len(peft) == 4
    for lay in peft:
        assert lay.config["peft"] == "lora" and tuple(lay.config["lora_target_modules"]) == SIX, lay.id


def test_lora_is_written_as_bridge_applies_it_and_as_python_that_runs_on_either_recipe():
    """Run on Bridge 0.6.2 with hydra-core 1.3.8: a PEFT recipe's LoRA is callable, so Bridge leaves it out of its
    OmegaConf view and restores the object after the overrides; '++peft.dim=64' changes it in place, a plain
    'peft.dim=64' is refused, and a '++peft._target_' would be dropped together with its fields. The override list
    is therefore written for a PEFT recipe (no _target_); the Python form also builds a LoRA where peft is None."""
    from moe_long_context.dialects.overrides import bridge_override_list, bridge_python_snippet

    cfg = TrainingConfig(
        **{**SUPER_PEFT_16, "lora_dim": 64, "lora_target_modules": ("linear_qkv", "in_proj")}
    )
    overrides = bridge_override_list(cfg)
    assert [o for o in overrides if "peft" in o] == [
        "++peft.dim=64",
        "++peft.target_modules=[linear_qkv,in_proj]",
    ]
    again = _lint(overrides)
    assert (again.effective_config["peft"], again.effective_config["lora_dim"]) == ("lora", 64)
    assert tuple(again.effective_config["lora_target_modules"]) == ("linear_qkv", "in_proj")
    assert not {"BRIDGE_PEFT_KEY_PLAIN", "BRIDGE_PEFT_OBJECT_RESTORED"} & {f.code for f in again.findings}
    at_default = bridge_override_list(TrainingConfig(**{**SUPER_PEFT_16, "lora_target_modules": SIX}))
    assert "++peft.dim=32" in at_default  # written even at LoRA's default: the recipe's own dim may differ
    snippet = bridge_python_snippet(cfg).splitlines()
    i = snippet.index("from megatron.bridge.peft.lora import LoRA")
    assert snippet[i + 1 : i + 4] == [
        "cfg.peft = cfg.peft or LoRA()", "cfg.peft.dim = 64", "cfg.peft.target_modules = ['linear_qkv', 'in_proj']",
    ]  # fmt: skip
    full = bridge_override_list(TrainingConfig(**{**SUPER_PEFT_16, "peft": "none"}))
    assert not [o for o in full if "peft" in o]  # full training is the default: nothing written


def test_plain_peft_keys_are_refused_and_a_target_or_null_is_undone_on_a_peft_recipe():
    plain = _lint([*OVERRIDES[:6], "peft.dim=16", "+peft.alpha=16"])
    (refused,) = [f for f in plain.findings if f.code == "BRIDGE_PEFT_KEY_PLAIN"]
    assert refused.severity == Severity.error and refused.keys == ["peft.dim"]  # '+' adds the key: accepted
    assert "Could not override" in refused.message and refused.fix.startswith("Write ++peft.dim")
    assert "++peft.dim=16" in plain.corrected
    target = _lint([*OVERRIDES[:6], "++peft._target_=megatron.bridge.peft.lora.LoRA", "++peft.dim=16"])
    codes = {f.code: f for f in target.findings}
    assert "BRIDGE_UNKNOWN_KEY" not in codes and "BRIDGE_PEFT_KEY_PLAIN" not in codes
    assert codes["BRIDGE_PEFT_OBJECT_RESTORED"].severity == Severity.warning
    assert codes["BRIDGE_PEFT_OBJECT_RESTORED"].keys == ["peft._target_"]
    null = _lint([*OVERRIDES[:6], "peft=null"])
    assert null.effective_config["peft"] == "none"
    assert [f.keys for f in null.findings if f.code == "BRIDGE_PEFT_OBJECT_RESTORED"] == [["peft"]]


def test_lint_keeps_the_modelled_targets_and_lists_the_others_as_not_checked():
    """Bridge accepts any target_modules entry and only warns when one matches no module
    (peft/module_matcher.py:195-209): lint models LoRA on the names it knows and says what it did not read."""
    r = _lint([*OVERRIDES[:7], "++peft.target_modules=[q_proj,linear_qkv]"])
    assert r.effective_config["peft"] == "lora" and r.effective_config["lora_target_modules"] == [
        "linear_qkv"
    ]
    [entry] = [n for n in r.not_checked if n.keys == ["peft.target_modules"]]
    assert entry.requires.startswith("q_proj: not a modelled module name")


@pytest.mark.parametrize("targets", ["[q_proj]", "['*.linear_qkv']", "5", "[]", "null"])
def test_lint_with_no_modelled_target_reads_no_lora_and_says_so(targets):
    r = _lint([*OVERRIDES[:7], f"++peft.target_modules={targets}"])
    assert r.effective_config["peft"] == "none"
    [entry] = [n for n in r.not_checked if n.keys == ["peft.target_modules"]]
    assert "no modelled module name" in entry.requires and "full training" in entry.requires


def test_an_empty_target_list_names_what_bridge_does_with_it():
    """No entry at all: Bridge's matcher then takes every nn.Linear exclude_modules does not name
    (peft/module_matcher.py:113-121), which the engine does not model; lint says so instead of refusing."""
    r = _lint([*OVERRIDES[:7], "++peft.target_modules=[]"])
    [entry] = [n for n in r.not_checked if n.keys == ["peft.target_modules"]]
    assert entry.requires.startswith("empty, so Bridge's matcher takes every nn.Linear")


def _codes(r, severity: str = "error") -> list[str]:
    return [f.code for f in r.findings if f.severity.value == severity]


@pytest.mark.parametrize(
    ("targets", "fires"),
    [
        (None, True),  # LoRA's default target_modules is four linears (peft/lora.py:101-103)
        ("++peft.target_modules=[linear_qkv]", True),
        (
            "++peft.target_modules=[]",
            False,
        ),  # the matcher then takes every linear exclude_modules does not name
    ],
)
@pytest.mark.parametrize("excluded", ["[linear_fc2]", "linear_fc2"])  # a bare name stays a str: len() > 0 too
def test_exclude_modules_next_to_target_modules_stops_the_run(targets, fires, excluded):
    """Bridge 0.6.2 peft/module_matcher.py:141-142 asserts exclude_modules is empty when target_modules is not."""
    overrides = [*OVERRIDES[:7], f"++peft.exclude_modules={excluded}", *([targets] if targets else [])]
    r = _lint(overrides)
    assert ("PEFT_EXCLUDE_WITH_TARGETS" in _codes(r)) is fires
    if fires:
        [f] = [f for f in r.findings if f.code == "PEFT_EXCLUDE_WITH_TARGETS"]
        assert "peft.exclude_modules" in f.keys and "++peft.target_modules=[]" in f.fix
        assert not r.valid


def test_normalize_moe_lora_is_judged_and_its_memory_effect_listed_as_not_modelled():
    """Its check (Bridge peft/utils.py:694, the rank divisible by moe_router_topk) is a rule now; what stays unmodelled
    is the smaller expert adapters it makes, so lint lists the key with that note and no inventory row."""
    r = _lint([*OVERRIDES[:7], "++peft.normalize_moe_lora=true"])
    [entry] = [n for n in r.not_checked if n.keys == ["peft.normalize_moe_lora"]]
    assert entry.id is None and "validity is judged" in entry.requires and "not modelled" in entry.requires
    assert "br-pu-002" not in {n.id for n in r.not_checked}


@pytest.mark.parametrize(
    ("dim", "targets", "expect"),
    [(12, None, True), (16, None, False), (12, "[linear_qkv,linear_proj]", False)],
)
def test_normalize_moe_lora_needs_a_dim_divisible_by_topk(dim, targets, expect):
    """peft/utils.py:682-697: expert adapters get dim // moe_router_topk (Qwen3-30B-A3B routes top-8); only expert
    linears reach it, so attention-only targets never raise."""
    overrides = ["model.expert_model_parallel_size=8", "train.global_batch_size=64", f"++peft.dim={dim}",
                 "++peft.normalize_moe_lora=true"] + ([f"++peft.target_modules={targets}"] if targets else [])  # fmt: skip
    r = lint_config(
        LintConfigRequest(bridge_overrides=overrides, model="qwen3-30b-a3b", gpu="h100", num_gpus=8)
    )
    found = [f for f in r.findings if f.code == "LORA_NORMALIZED_DIM_TOPK"]
    assert bool(found) is expect
    if expect:
        assert (
            found[0].severity is Severity.error
            and "(e.g. 16)" in found[0].fix
            and "top-8" in found[0].message
        )
    off = lint_config(LintConfigRequest(bridge_overrides=overrides[:-1] if not targets else overrides[:3] + overrides[4:],
                                        model="qwen3-30b-a3b", gpu="h100", num_gpus=8))  # fmt: skip
    assert "LORA_NORMALIZED_DIM_TOPK" not in {
        f.code for f in off.findings
    }  # normalize off: the full dim everywhere
