"""Activation recompute and fine-grained activation offload checks (Megatron Core 0.19 labels)."""

from __future__ import annotations

from collections.abc import Iterator

from ...errors import closest
from ..config import RECOMPUTE_MODULES
from ..context import Context
from ..findings import Finding
from .table import check, finding

# Informal names seen in the wild (the original NVIDIA skill among them) and the real labels.
INFORMAL_LABELS = {
    "up_proj": "mla_up_proj",
    "norm": "layernorm",
    "moe_layer": "moe",
    "attn": "core_attn",
    "attention": "core_attn",
    "act": "moe_act",
    "shared_expert": "shared_experts",
}


@check("recompute")
def granularity_and_method(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.recompute_granularity == "full":
        if c.recompute_method is None or c.recompute_num_layers is None:
            missing = [
                n
                for n, v in (
                    ("recompute_method", c.recompute_method),
                    ("recompute_num_layers", c.recompute_num_layers),
                )
                if v is None
            ]
            yield finding(
                "RECOMPUTE_METHOD_REQUIRED",
                f"Full recompute without {' and '.join(missing)}.",
                "Set recompute_method=uniform and recompute_num_layers=1 (every layer keeps only its input).",
                missing,
            )
        elif ctx.split.split is not None:
            per_chunk = max(s.decoders for row in ctx.split.split.stages for s in row)
            if c.recompute_num_layers > per_chunk:
                yield finding(
                    "RECOMPUTE_NUM_LAYERS_RANGE",
                    f"recompute_num_layers={c.recompute_num_layers} exceeds the {per_chunk} layers of a model "
                    "chunk; Megatron clamps it.",
                    f"Use at most {per_chunk}.",
                    ["recompute_num_layers"],
                )
    if c.recompute_granularity == "selective" and c.recompute_num_layers is not None:
        yield finding(
            "RECOMPUTE_SELECTIVE_NUM_LAYERS",
            f"Selective recompute with recompute_num_layers={c.recompute_num_layers}.",
            "Drop recompute_num_layers with selective recompute.",
            ["recompute_num_layers"],
        )
    if c.recompute_granularity == "selective" and c.recompute_method and c.launcher == "megatron-lm":
        yield finding(
            "RECOMPUTE_SELECTIVE_METHOD",
            f"Selective recompute with recompute_method={c.recompute_method}.",
            "Drop --recompute-method with --recompute-granularity selective.",
            ["recompute_method"],
        )


def unused_modules(labels: list[str], why: str, fix: str) -> Finding:
    """RECOMPUTE_MODULES_UNUSED for ``labels``, naming any that Megatron Core 0.19 would not accept."""
    unknown = [name for name in labels if name not in RECOMPUTE_MODULES]
    named = (
        f"; {', '.join(repr(n) for n in unknown)} {'is not a label' if len(unknown) == 1 else 'are not labels'} "
        f"Megatron Core 0.19 accepts ({', '.join(RECOMPUTE_MODULES)})"
        if unknown
        else ""
    )
    return finding(
        "RECOMPUTE_MODULES_UNUSED",
        f"recompute_modules={list(labels)} {why}{named}.",
        fix,
        ["recompute_modules", "recompute_granularity"],
    )


@check("recompute")
def modules(ctx: Context) -> Iterator[Finding]:
    c, m = ctx.cfg, ctx.model
    if c.recompute_granularity != "selective":
        if c.recompute_modules:
            yield unused_modules(
                c.recompute_modules,
                f"without recompute_granularity=selective (it is {c.recompute_granularity or 'unset'}): Megatron "
                "reads the labels only for selective recompute",
                "Set recompute_granularity=selective to recompute them, or drop recompute_modules.",
            )
        return
    if c.recompute_modules is None:
        yield finding(
            "RECOMPUTE_DEFAULT_MODULES",
            "Selective recompute without recompute_modules recomputes only core_attn, which saves little with "
            "fused attention.",
            "Name the modules, e.g. pick_recompute's choice.",
            ["recompute_modules"],
        )
    mods = ctx.recompute_modules
    for name in mods:
        if name not in RECOMPUTE_MODULES:
            real = INFORMAL_LABELS.get(name) or closest(name, RECOMPUTE_MODULES)
            yield finding(
                "RECOMPUTE_UNKNOWN_MODULE",
                f"recompute_modules has {name!r}, which Megatron Core 0.19 rejects.",
                (f"Use {real!r}. " if real else "") + "Allowed: " + ", ".join(RECOMPUTE_MODULES) + ".",
                ["recompute_modules"],
            )
    if "moe_act" in mods and not c.moe_grouped_gemm:
        yield finding(
            "RECOMPUTE_MOE_ACT_GROUPED_GEMM",
            "moe_act recompute without moe_grouped_gemm.",
            "Set moe_grouped_gemm=true.",
            ["recompute_modules", "moe_grouped_gemm"],
        )
    if "mla_up_proj" in mods and not m.is_mla:
        yield finding(
            "RECOMPUTE_MLA_UP_PROJ",
            f"mla_up_proj recompute, but {m.name} does not use multi-latent attention.",
            "Drop mla_up_proj; for GQA models layernorm and moe_act are the output-discarding choices.",
            ["recompute_modules"],
        )
    if "gdn_norm_out" in mods and not m.has_linear_attention:
        yield finding(
            "RECOMPUTE_GDN_NORM_OUT",
            f"gdn_norm_out recompute, but {m.name} has no Gated DeltaNet layers.",
            "Drop gdn_norm_out.",
            ["recompute_modules"],
        )
    if "shared_experts" in mods and m.moe_shared_expert_intermediate_size and c.moe_shared_expert_overlap:
        yield finding(
            "RECOMPUTE_SHARED_EXPERT_OVERLAP",
            "shared_experts recompute with moe_shared_expert_overlap.",
            "Turn moe_shared_expert_overlap off, or drop shared_experts from recompute_modules.",
            ["recompute_modules", "moe_shared_expert_overlap"],
        )
    if c.precision == "fp8-delayed" and {"moe_act", "layernorm"} & set(mods):
        yield finding(
            "RECOMPUTE_FP8_DELAYED",
            "moe_act/layernorm recompute with FP8 delayed scaling.",
            "Use fp8-tensorwise or fp8-blockwise (or MXFP8 on Blackwell), or drop moe_act/layernorm.",
            ["recompute_modules", "precision"],
        )
    if "core_attn" in mods and (c.seq_len or 0) >= 16384:
        yield finding(
            "RECOMPUTE_CORE_ATTN_FUSED",
            f"core_attn recompute at {c.seq_len} tokens: fused attention keeps almost nothing to free, and the "
            "recompute repeats the most expensive kernel of a long-context step.",
            "Drop core_attn; recompute layernorm, moe_act or mla_up_proj instead.",
            ["recompute_modules"],
        )
    if "mlp" in mods and m.all_layers_moe:
        yield finding(
            "RECOMPUTE_NO_EFFECT",
            f"mlp recompute acts on dense MLP layers only; every layer of {m.name} is MoE.",
            "Drop mlp; use moe_act, moe or shared_experts.",
            ["recompute_modules"],
        )
    if "shared_experts" in mods and not m.moe_shared_expert_intermediate_size:
        yield finding(
            "RECOMPUTE_NO_EFFECT",
            f"shared_experts recompute, but {m.name} has no shared experts.",
            "Drop shared_experts.",
            ["recompute_modules"],
        )


@check("recompute")
def ep_overlap_and_offload(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    mods = ctx.recompute_modules
    if c.ep_overlap:
        bad = []
        if c.recompute_granularity == "full":
            bad.append("full recompute")
        if c.recompute_method is not None:
            bad.append("recompute_method")
        if c.recompute_num_layers is not None:
            bad.append("recompute_num_layers")
        if "moe" in mods:
            bad.append("moe recompute")
        if bad:
            yield finding(
                "RECOMPUTE_EP_OVERLAP",
                f"EP all-to-all overlap with {', '.join(bad)}.",
                "Use selective recompute without moe (e.g. moe_act, layernorm), or turn ep_overlap off.",
                ["ep_overlap", "recompute_granularity", "recompute_modules"],
            )
    if c.activation_offload == []:
        yield finding(
            "OFFLOAD_NEEDS_MODULES",
            "Fine-grained activation offloading is on with no offload module.",
            "Name the modules to offload (e.g. expert_fc1, moe_act), or turn offloading off.",
            ["activation_offload"],
        )
    offload = set(c.activation_offload or [])
    if not offload:
        return
    if "moe" in mods and offload & {"moe_act", "expert_fc1", "fused_group_mlp"}:
        yield finding(
            "RECOMPUTE_MOE_OFFLOAD",
            f"moe recompute while offloading {sorted(offload & {'moe_act', 'expert_fc1', 'fused_group_mlp'})}.",
            "Offloading inside a recomputed MoE layer is redundant; drop one of the two.",
            ["recompute_modules", "activation_offload"],
        )
    if "attn_proj" in offload and "core_attn" not in offload:
        yield finding(
            "OFFLOAD_MODULE_RULES",
            "Offloading attn_proj without core_attn (attn_proj's input is core_attn's output).",
            "Add core_attn to activation_offload.",
            ["activation_offload"],
        )
    if "fused_group_mlp" in offload and offload & {"expert_fc1", "moe_act"}:
        yield finding(
            "OFFLOAD_MODULE_RULES",
            "fused_group_mlp offload already covers the whole grouped MLP; it excludes expert_fc1 and moe_act.",
            "Keep fused_group_mlp alone (it also needs use_transformer_engine_op_fuser), or drop it.",
            ["activation_offload"],
        )
    if ctx.cfg.nvte_cpu_offload_v1 is False:
        yield finding(
            "OFFLOAD_ENV_MISSING",
            "Fine-grained activation offload without NVTE_CPU_OFFLOAD_V1=1 in the launch's environment: with "
            "TE >= 2.10 Megatron-LM and Megatron Bridge refuse it (only the exact value 1 passes).",
            "Add 'export NVTE_CPU_OFFLOAD_V1=1' to the launch script.",
            ["activation_offload", "nvte_cpu_offload_v1"],
        )
    elif ctx.cfg.nvte_cpu_offload_v1 is None:
        yield finding(
            "OFFLOAD_ENV",
            "Fine-grained activation offload: with TE >= 2.10 Megatron-LM and Megatron Bridge need "
            "NVTE_CPU_OFFLOAD_V1=1 in the environment.",
            "Export NVTE_CPU_OFFLOAD_V1=1 in the launch environment.",
            ["activation_offload"],
        )
