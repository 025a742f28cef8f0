"""One engine, one verdict: every tool that receives a configuration reports the same errors for it.

The configurations are drawn over the fields every compared tool receives (check_dp_budget, the narrowest),
plus MoE and graph settings for the tools that take them. Memory-fit findings are left out: they come from
the memory estimate, which only some tools make.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_long_context.dialects.overrides import bridge_override_list, megatron_args_for
from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import rule_table, run
from moe_long_context.errors import InputError
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from moe_long_context.tools.estimate_memory import EstimateMemoryRequest, estimate_memory
from moe_long_context.tools.lint_config import LintConfigRequest, lint_config
from moe_long_context.tools.pick_recompute import PickRecomputeRequest, pick_recompute
from moe_long_context.tools.size_cp import SizeCpRequest, size_cp
from moe_long_context.tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    validate_cuda_graph_shapes,
)

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rule_errors(findings) -> set[str]:
    """Error codes of the engine's rules (not of the memory estimate)."""
    table = rule_table()
    return {
        f.code
        for f in findings
        if f.severity == Severity.error and f.code in table and table[f.code].family != "memory"
    }


@st.composite
def layouts(draw) -> dict:
    model = draw(st.sampled_from(["qwen3-30b-a3b", "gpt-oss-20b", "moonlight-16b-a3b"]))
    tp = draw(st.sampled_from([1, 2, 4]))
    cp = draw(st.sampled_from([1, 2, 4]))
    ep = draw(st.sampled_from([1, 4, 8]))
    cfg = dict(
        model=model,
        gpu=draw(st.sampled_from(["h100", "b200", "gb200"])),
        tp=tp,
        cp=cp,
        ep=ep,
        num_gpus=math.lcm(tp * cp, ep) * draw(st.sampled_from([1, 2])),
        seq_len=draw(st.sampled_from([4096, 8192, 4104])),
        launcher=draw(st.sampled_from(["bridge", "megatron-lm"])),
    )
    comm = draw(st.sampled_from([None, "p2p", "a2a", "all_gather", "a2a+p2p"]))
    if comm is not None:
        cfg["cp_comm_type"] = comm
        if comm == "a2a+p2p" and draw(st.booleans()):
            cfg["hierarchical_cp_sizes"] = [cp, 1] if draw(st.booleans()) else [1, cp]
    if draw(st.booleans()):
        cfg["sequence_parallel"] = draw(st.booleans())
    return cfg


@st.composite
def moe_settings(draw) -> dict:
    out: dict = {}
    out["dispatcher"] = draw(st.sampled_from(["alltoall", "flex-deepep", "allgather"]))
    if draw(st.booleans()):
        out.update(moe_capacity_factor=1.0, moe_pad_expert_input_to_capacity=draw(st.booleans()))
    out["cuda_graph_impl"] = draw(st.sampled_from(["none", "transformer_engine", "full_iteration"]))
    out["precision"] = draw(st.sampled_from(["bf16", "fp8-blockwise", "mxfp8"]))
    out["packed_sequences"] = draw(st.booleans())
    return out


def _fields(request_type, cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k in request_type.model_fields}


def _tool_errors(cfg: dict) -> dict[str, set[str]]:
    out = {
        "engine": rule_errors(run(build_context(TrainingConfig(**cfg)))),
        "estimate_memory": rule_errors(estimate_memory(EstimateMemoryRequest(**cfg)).findings),
        "validate_cuda_graph_shapes": rule_errors(
            validate_cuda_graph_shapes(
                ValidateCudaGraphsRequest(**_fields(ValidateCudaGraphsRequest, cfg))
            ).findings
        ),
    }
    if set(cfg) <= set(CheckDpBudgetRequest.model_fields):
        out["check_dp_budget"] = rule_errors(check_dp_budget(CheckDpBudgetRequest(**cfg)).findings)
    # lint_config reads the launch in the launcher's own dialect
    training = TrainingConfig(**cfg)
    where = dict(model=cfg["model"], gpu=cfg["gpu"], num_gpus=cfg["num_gpus"])
    if cfg["launcher"] == "bridge":
        r = lint_config(LintConfigRequest(bridge_overrides=bridge_override_list(training), **where))
    elif not cfg.get("packed_sequences"):  # a Bridge dataset setting: no Megatron-LM flag carries it
        mtp = build_context(training).mtp_layers
        r = lint_config(LintConfigRequest(megatron_args=megatron_args_for(training, mtp_layers=mtp), **where))
    else:
        return out
    out["lint_config"] = rule_errors(r.findings)
    return out


@FAST
@given(cfg=layouts())
def test_every_tool_reports_the_same_errors_for_a_layout(cfg):
    found = _tool_errors(cfg)
    assert "check_dp_budget" in found
    engine = found.pop("engine")
    for tool, codes in found.items():
        assert codes == engine, (tool, cfg)


@FAST
@given(cfg=layouts(), moe=moe_settings())
def test_every_tool_reports_the_same_errors_with_moe_and_graph_settings(cfg, moe):
    full = {**cfg, **moe}
    if moe["cuda_graph_impl"] == "full_iteration":
        full["check_for_nan_in_loss"] = False
    found = _tool_errors(full)
    engine = found.pop("engine")
    for tool, codes in found.items():
        assert codes == engine, (tool, full)


@FAST
@given(cfg=layouts())
def test_pick_recompute_agrees_on_invalid_layouts(cfg):
    engine = rule_errors(run(build_context(TrainingConfig(**cfg))))
    if not engine:
        return
    r = pick_recompute(PickRecomputeRequest(**cfg))
    assert not r.valid and rule_errors(r.findings) == engine, cfg


@FAST
@given(
    model=st.sampled_from(
        ["qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "qwen3-next-80b-a3b"]
    ),
    seq_len=st.sampled_from([32768, 131072, 65536 + 2048]),
    tp=st.sampled_from([1, 2, 4]),
    packed=st.booleans(),
    launcher=st.sampled_from(["bridge", "megatron-lm"]),
)
def test_size_cp_choice_passes_every_cp_rule(model, seq_len, tp, packed, launcher):
    try:
        r = size_cp(SizeCpRequest(model=model, seq_len=seq_len, tp=tp, gpu="h100", packed_sequences=packed,
                                  launcher=launcher))  # fmt: skip
    except InputError:
        return  # no legal CP at this TP: refused with a reason
    cfg = TrainingConfig(model=model, gpu="h100", seq_len=seq_len, tp=tp, cp=r.cp, cp_comm_type=r.cp_comm_type,
                         hierarchical_cp_sizes=r.hierarchical_cp_sizes, packed_sequences=packed,
                         launcher=launcher, num_gpus=tp * r.cp)  # fmt: skip
    found = rule_errors(run(build_context(cfg)))
    assert not {c for c in found if c.startswith(("CP_", "SEQ_", "GDN_"))}, (r.cp, r.cp_comm_type, found)
