"""Mamba-2 hybrid stacks (Nemotron-H) as Megatron Core 0.19.2 builds them: head and group divisibility by TP and
CP (``ssm/mamba_mixer.py``, ``ssm/mamba_context_parallel.py``), FP8 widths, and how ``HybridModel`` splits the
layer pattern over pipeline stages (``models/hybrid/hybrid_layer_allocation.py`` select_pipeline_segment).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...model.params_hybrid import mamba_dims
from ..config import precision_is_quantized
from ..context import Context
from ..findings import Finding
from .table import check, finding


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def mamba_tp_cp_problems(heads: int, groups: int, tp: int, cp: int) -> list[tuple[str, str]]:
    """(rule code, message) for every Mamba divisibility Megatron asserts at this TP and CP."""
    out = []
    if heads % groups:
        out.append(
            ("MAMBA_HEADS_GROUPS", f"mamba_num_heads={heads} is not divisible by mamba_num_groups={groups}")
        )
    if heads % tp:
        out.append(("MAMBA_HEADS_TP", f"mamba_num_heads={heads} is not divisible by TP={tp}"))
    if groups % tp:
        out.append(("MAMBA_GROUPS_TP", f"mamba_num_groups={groups} is not divisible by TP={tp}"))
    if cp > 1 and not heads % tp:
        local = heads // tp
        if local % cp:
            out.append(
                (
                    "MAMBA_HEADS_CP",
                    f"Mamba heads per TP rank ({heads}/{tp} = {local}) are not divisible by CP={cp}",
                )
            )
        if not groups % tp:
            g = groups // tp
            if (g < cp and cp % g) or (g >= cp and g % cp):
                out.append(
                    (
                        "MAMBA_GROUPS_CP",
                        f"Mamba groups per TP rank ({groups}/{tp} = {g}) neither divide CP={cp} nor are divisible by it",
                    )
                )
    return out


def max_mamba_cp(heads: int, groups: int, tp: int, limit: int = 1 << 16) -> list[int]:
    """Every CP the Mamba layers allow at this TP (CP <= heads / TP)."""
    return [
        cp
        for cp in range(1, min(limit, max(1, heads // tp)) + 1)
        if not mamba_tp_cp_problems(heads, groups, tp, cp)
    ]


@check("layout")
def mamba_heads_and_groups(ctx: Context) -> Iterator[Finding]:
    m, c = ctx.model, ctx.cfg
    if not m.has_mamba:
        return
    heads, _, d_inner, groups, state = mamba_dims(m)
    for code, message in mamba_tp_cp_problems(heads, groups, c.tp, c.cp):
        if code in ("MAMBA_HEADS_CP", "MAMBA_GROUPS_CP"):
            ok = max_mamba_cp(heads, groups, c.tp)
            fix = f"Mamba's head-parallel CP allows CP in {ok} at TP={c.tp}."
            keys = ["cp", "tp"]
        elif code == "MAMBA_HEADS_GROUPS":
            fix, keys = "Fix the model config: each group needs a whole number of heads.", ["model"]
        else:
            ok_tp = [t for t in _divisors(groups) if heads % t == 0]
            fix, keys = f"Use TP in {ok_tp}.", ["tp"]
        yield finding(code, message + ".", fix, keys)
    width = 2 * d_inner + 2 * groups * state + heads
    if precision_is_quantized(c.precision) and width % 16:
        yield finding(
            "MAMBA_FP8_IN_PROJ",
            f"FP8/FP4 needs the Mamba in_proj output width (2 x {d_inner} + 2 x {groups} x {state} + {heads} = "
            f"{width}) to be a multiple of 16.",
            "Train this model in BF16.",
            ["precision"],
        )


@check("pipeline")
def hybrid_pipeline(ctx: Context) -> Iterator[Finding]:
    """HybridModel splits hybrid_layer_pattern, not a GPT layout: without '|' separators (Hugging Face patterns have
    none) layers split evenly over PP, or first/last counts with the middle split evenly, and VPP is refused."""
    m, c = ctx.model, ctx.cfg
    if not m.is_hybrid:
        return
    split_flags = [k for k in ("pipeline_layout", "account_for_embedding_in_pipeline_split",
                               "account_for_loss_in_pipeline_split") if getattr(c, k)]  # fmt: skip
    if split_flags and c.launcher == "megatron-lm":
        yield finding(
            "HYBRID_LM_SPLIT_FLAGS",
            f"{', '.join(split_flags)} with the hybrid {m.name}: Megatron-LM refuses a pipeline layout and the "
            "account-for flags next to --hybrid-layer-pattern, which defines the stages itself.",
            "Drop them; express stage boundaries with '|' in --hybrid-layer-pattern or the first/last stage counts.",
            split_flags,
        )
    if c.pp == 1:
        return
    n = m.num_layers
    if (ctx.vpp or 1) > 1 and c.launcher == "bridge":
        yield finding(
            "HYBRID_VPP_BRIDGE",
            f"VPP={ctx.vpp} on the hybrid {m.name}: Megatron Bridge 0.6.2's HybridModelProvider refuses virtual "
            "pipeline stages when it builds the model, whatever the pattern.",
            "Drop vpp (with PP > 1 that leaves plain 1F1B); Megatron-LM builds hybrid VPP from '|' in the pattern.",
            ["vpp"],
        )
    elif (ctx.vpp or 1) > 1:
        yield finding(
            "HYBRID_VPP_NEEDS_PIPES",
            f"VPP={ctx.vpp} on the hybrid {m.name}: Megatron refuses virtual pipeline stages when "
            "hybrid_layer_pattern has no '|' separators, and the checkpoint's pattern has none.",
            "Drop vpp, or put '|' stage boundaries into hybrid_layer_pattern (segments = PP x VPP).",
            ["vpp"],
        )
    first, last = c.num_layers_in_first_pipeline_stage, c.num_layers_in_last_pipeline_stage
    if first is None and last is None:
        if n % c.pp:
            ok = [p for p in _divisors(n) if p <= 64]
            yield finding(
                "HYBRID_PP_DIVISIBLE",
                f"The {n}-layer hybrid pattern of {m.name} does not split evenly over PP={c.pp} (HybridModel "
                "counts every pattern symbol as a layer).",
                f"Use PP in {ok}, or set num_layers_in_first/last_pipeline_stage.",
                ["pp"],
            )
    else:
        middle_stages = c.pp - (first is not None) - (last is not None)
        middle = n - (first or 0) - (last or 0)
        if middle_stages > 0 and middle % middle_stages:
            yield finding(
                "HYBRID_PP_DIVISIBLE",
                f"{middle} middle pattern layers do not split evenly over {middle_stages} middle stages.",
                "Pick first/last stage counts that leave a multiple of the middle stages.",
                ["num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"],
            )
    ignored = split_flags
    if ignored and c.launcher != "megatron-lm":
        yield finding(
            "HYBRID_GPT_SPLIT_IGNORED",
            f"{', '.join(ignored)} do not steer HybridModel's split: it allocates layers from hybrid_layer_pattern "
            "(and first/last stage counts) only.",
            "Express stage boundaries with '|' in hybrid_layer_pattern or first/last stage counts.",
            ignored,
        )


@check("recompute")
def mamba_recompute(ctx: Context) -> Iterator[Finding]:
    m, c = ctx.model, ctx.cfg
    if m.has_mamba and c.recompute_granularity == "selective":
        yield finding(
            "MAMBA_NO_SELECTIVE_LABEL",
            "Selective recompute has no Mamba label in Megatron Core 0.19.2: the Mamba layers keep all their "
            "activations; only the attention and MoE layers' labels apply.",
            "Use full recompute (uniform) if the Mamba activations do not fit.",
            ["recompute_modules"],
        )
