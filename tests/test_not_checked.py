"""Silence is never approval: a configuration that reaches an upstream check no rule models gets it back under
``not_checked`` (the check's file:line and what it requires), in lint_config and in the layout tools; a result
says what it covers (``checked``). One check per upstream file that has a not-modelled check."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.rules.upstream import checked, not_checked, upstream_checks
from moe_long_context.faces.summary import summarize
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.estimate_throughput import EstimateThroughputRequest, estimate_throughput
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.pick_recompute import PickRecomputeRequest, pick_recompute
from moe_long_context.tools.plan_layout import PlanLayoutRequest, plan_layout
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)

LM = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 "
      "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16")  # fmt: skip
BRIDGE = ["model.expert_model_parallel_size=8", "train.global_batch_size=64"]

# (upstream check, model, megatron-lm flags or bridge overrides that reach it): one for every upstream file with a
# not-modelled check
REACHES = [
    ("MCore transformer/transformer_config.py:2155", "qwen3-30b-a3b", f"{LM} --use-te-activation-func"),
    ("Bridge peft/module_matcher.py:136", "qwen3-30b-a3b",
     [*BRIDGE, "++peft._target_=megatron.bridge.peft.canonical_lora.CanonicalLoRA", "++peft.canonical_mapping={}"]),
]  # fmt: skip


def _lint(model: str, launch):
    key = "megatron_args" if isinstance(launch, str) else "bridge_overrides"
    return lint_config(LintConfigRequest(**{key: launch}, model=model, num_gpus=8))


def test_every_file_with_a_not_modelled_check_is_covered():
    files = {c.source.rsplit(":", 1)[0] for c in upstream_checks() if c.status == "not_modelled"}
    assert files == {source.rsplit(":", 1)[0] for source, _, _ in REACHES}


@pytest.mark.parametrize(("source", "model", "launch"), REACHES, ids=[r[0] for r in REACHES])
def test_lint_lists_the_check_a_launch_reaches(source, model, launch):
    r = _lint(model, launch)
    entry = next((n for n in r.not_checked if n.source == source), None)
    assert entry is not None, [n.label() for n in r.not_checked]
    check = next(c for c in upstream_checks() if c.source == source)
    assert entry.id == check.id and entry.requires == check.requires and entry.keys
    assert r.checked == checked()


def test_a_value_that_makes_the_guard_false_does_not_reach_it():
    """TransformerConfig needs the flash backend in batch-invariant mode (guard: batch_invariant_mode on):
    model.batch_invariant_mode=true reaches it, and false makes the guard false."""
    source = "MCore transformer/transformer_config.py:2876"
    reached = _lint("qwen3-30b-a3b", [*BRIDGE, "model.batch_invariant_mode=true"]).not_checked
    assert [n for n in reached if n.source == source]
    assert not [
        n
        for n in _lint("qwen3-30b-a3b", [*BRIDGE, "model.batch_invariant_mode=false"]).not_checked
        if n.source == source
    ]


def test_keys_every_launch_sets_reach_nothing_and_modelled_checks_are_not_listed():
    r = _lint("qwen3-30b-a3b", f"{LM} --lr 1e-4")
    assert [(n.keys, n.source) for n in r.not_checked] == [(["--lr"], None)]
    assert not not_checked(TrainingConfig(model="qwen3-30b-a3b", num_gpus=64, tp=4, cp=8, ep=8, pp=2, vpp=2, seq_len=131072,
                                          ep_overlap=True, recompute_granularity="selective"))  # fmt: skip


def test_checks_of_the_other_front_end_are_left_out():
    """validate_args runs only under Megatron-LM, ConfigContainer.validate only under Bridge."""
    sources = {
        n.source or "" for n in _lint("qwen3-30b-a3b", [*BRIDGE, "dist.use_torch_fsdp2=true"]).not_checked
    }
    assert not any(s.startswith("LM ") for s in sources)
    assert not any(s.startswith("Bridge ") for s in (n.source or "" for n in _lint(
        "qwen3-30b-a3b", f"{LM} --use-megatron-fsdp").not_checked))  # fmt: skip


GLM5 = dict(model="glm-5", gpu="h100", num_gpus=512, seq_len=131072, tp=1, cp=8, pp=8, ep=64, gbs=64)
PACKED_CP = "Bridge training/config.py:1452"
DELAY_WGRAD_BIAS = "Bridge training/comm_overlap.py:555"


@pytest.mark.parametrize(
    ("tool", "request_model", "extra"),
    [
        (validate_cuda_graph_shapes, ValidateCudaGraphsRequest, {"cuda_graph_impl": "transformer_engine"}),
        (estimate_memory, EstimateMemoryRequest, {}),
        (estimate_throughput, EstimateThroughputRequest, {}),
        (pick_recompute, PickRecomputeRequest, {}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_the_layout_tools_list_what_the_settings_reach(tool, request_model, extra):
    """The request's fields reach only modelled checks: packed sequences (fine-tuning) with CP > 1 reach Bridge's
    per-token-loss assert, which the tools report as a warning while the request leaves the setting unset."""
    fields = set(request_model.model_fields)
    req = {k: v for k, v in {**GLM5, **extra}.items() if k in fields}
    plain = tool(request_model(**req))
    assert plain.not_checked == [] and plain.checked == checked() and checked().upstream > 0
    packed = tool(request_model(**req, packed_sequences=True, pad_to_max_length=True, pad_cu_seqlens=True))
    assert PACKED_CP not in {n.source for n in packed.not_checked}
    if tool is not validate_cuda_graph_shapes:  # which runs the graph and sequence families only
        assert "FINETUNE_CP_PER_TOKEN_LOSS_UNSEEN" in {f.code for f in packed.findings}
    wgrad = tool(request_model(**req, ep_overlap=True, delay_wgrad_compute=True, vpp=2))
    assert DELAY_WGRAD_BIAS not in {n.source for n in wgrad.not_checked}  # modelled (BRIDGE_DELAY_WGRAD_*)


def test_check_dp_budget_and_plan_layout_say_what_they_checked():
    """Their request fields (layout, split, batch; model, GPU, length, precision, dispatcher) reach only modelled
    checks: nothing comes back unchecked, and the result says what was covered."""
    r = check_dp_budget(CheckDpBudgetRequest(**{k: v for k, v in GLM5.items()}))
    assert r.not_checked == [] and r.checked == checked()
    plan = plan_layout(PlanLayoutRequest(model="glm-5", gpu="h100", num_gpus=512, seq_len=131072, top_n=1))
    assert plan.not_checked == [] and plan.checked == checked()


def test_the_summary_says_what_was_checked_and_lists_what_was_not():
    source, model, launch = REACHES[0]  # --use-te-activation-func: MCore's activation check, not modelled
    text = summarize("lint_config", _lint(model, launch).model_dump(mode="json"))
    c = checked()
    assert (
        f"Checked: {c.rules} rules, modelling {c.upstream} of the {c.applicable} applicable upstream checks."
        in text
    )
    assert "upstream checks no rule models; unverified, not approved):" in text
    assert source in text and "use_te_activation_func" in text
    memory = summarize(
        "estimate_memory", estimate_memory(EstimateMemoryRequest(**GLM5)).model_dump(mode="json")
    )
    assert (
        f"modelling {c.upstream} of the {c.applicable}" in memory and "unverified, not approved" not in memory
    )
