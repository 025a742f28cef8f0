"""DeepSeek sparse attention (DSA: MLA plus a lightning indexer; GLM-5, DeepSeek-V3.2) as Megatron Core 0.19.2
builds it: what CP supports, what the config forbids, and where Megatron Bridge 0.6.2 stands.

DSA does not run Transformer Engine's context parallelism: ``DSAttention`` all-gathers K/V itself
(``transformer/experimental_attention_variant/dsa.py`` :1805-1835), packed THD sequences included
(``dsa_layout.py`` packed allgather CP), so TE's comm-type limits for MLA do not apply to it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...model.specs import ModelSpec
from ..config import precision_is_quantized
from ..context import Context
from ..findings import Finding
from .table import check, finding


def default_comm_type(model: ModelSpec, comm: str | None) -> str:
    """cp_comm_type a DSA model runs with: Bridge's GLM-5 provider sets allgather when the launch does not
    (glm5_bridge.py:128); Megatron's own default is p2p."""
    if comm is None and model.family == "glm_moe_dsa":
        return "all_gather"
    return comm or "p2p"


def dsa_comm_type_findings(model: ModelSpec, cp: int, comm: str | None) -> list[Finding]:
    """Findings for cp_comm_type on a DSA model at CP > 1 (used by the cp rules and size_cp)."""
    out: list[Finding] = []
    effective = default_comm_type(model, comm)
    if cp > 1 and effective != "all_gather":
        out.append(
            finding(
                "DSA_CP_NEEDS_ALLGATHER",
                f"{model.name} uses DeepSeek sparse attention; Megatron Core 0.19.2 runs DSA with CP only over "
                f"allgather, not {effective} ('DSAttention context parallelism currently supports "
                "cp_comm_type=allgather only').",
                "Set cp_comm_type all_gather (Megatron normalises it to allgather).",
                ["cp_comm_type", "cp"],
            )
        )
    if cp > 1 and comm is None and model.family == "glm_moe_dsa":
        out.append(
            finding(
                "DSA_BRIDGE_SETS_ALLGATHER",
                "cp_comm_type unset: Megatron Bridge's GLM-5 provider sets cp_comm_type='allgather' itself.",
                "Pass cp_comm_type all_gather explicitly to make the launch independent of the provider.",
                ["cp_comm_type"],
            )
        )
    return out


@check("cp")
def dsa_config(ctx: Context) -> Iterator[Finding]:
    m, c = ctx.model, ctx.cfg
    if not m.has_dsa:
        return
    if m.add_bias_linear:
        yield finding(
            "DSA_NO_LINEAR_BIAS",
            f"{m.name} has linear biases; DSA's AbsorbedMLASelfAttention requires add_bias_linear=False.",
            "Use a DSA model without linear biases.",
            ["model"],
        )
    if m.family == "deepseek_v32" and c.launcher == "bridge":
        yield finding(
            "DSA_NO_BRIDGE",
            "Megatron Bridge 0.6.2 ships no deepseek_v32 bridge (models/deepseek holds v2, v3 and v4 only), so "
            "AutoBridge cannot convert a DeepSeek-V3.2 checkpoint.",
            "Launch DeepSeek-V3.2 with Megatron-LM (launcher megatron-lm) and --experimental-attention-variant dsa.",
            ["launcher", "model"],
        )


@check("recompute")
def dsa_recompute(ctx: Context) -> Iterator[Finding]:
    """DSA runs MLA absorbed (AbsorbedMLASelfAttention): mla_up_proj recompute applies, but not with FP8/FP4."""
    m, c = ctx.model, ctx.cfg
    if not m.has_dsa or c.recompute_granularity != "selective" or "mla_up_proj" not in ctx.recompute_modules:
        return
    if precision_is_quantized(c.precision):
        yield finding(
            "DSA_MLA_UP_PROJ_QUANTIZED",
            f"mla_up_proj recompute with {c.precision} on the DSA model {m.name}: AbsorbedMLASelfAttention asserts "
            "'FP8/FP4 is not supported for AbsorbedMLA' when it checkpoints the up-projection.",
            "Drop mla_up_proj from recompute_modules, or train in BF16.",
            ["recompute_modules", "precision"],
        )


def skip_topk_layer(layer: int, offset: int, freq: int) -> bool:
    """A 1-indexed layer that reuses an earlier layer's top-k indices (dsa.py:37-47 is_dsa_skip_topk_layer)."""
    return (max(layer - max(offset, 1), 0) % freq) != 0


@check("pipeline")
def dsa_index_share_split(ctx: Context) -> Iterator[Finding]:
    """With index sharing (dsa_indexer_topk_freq > 1) a stage that starts on a layer reusing top-k indices would
    need them from the stage before: Megatron Core refuses such a split (virtual stages in layer order)."""
    m, split = ctx.model, ctx.split.split
    if not m.has_dsa or m.dsa_index_topk_freq <= 1 or split is None:
        return
    layer, bad = 0, []
    for v in range(split.vpp):
        for r in range(split.pp):
            count = split.stages[r][v].decoders
            if count and skip_topk_layer(layer + 1, m.dsa_index_skip_topk_offset, m.dsa_index_topk_freq):
                bad.append(layer + 1)
            layer += count
    if bad:
        yield finding(
            "DSA_INDEX_SHARE_SPLIT",
            f"Pipeline stages of {m.name} start on layers {bad[:6]}, which reuse the top-k indices of an earlier "
            f"layer (dsa_indexer_topk_freq {m.dsa_index_topk_freq}): the indices do not cross stage boundaries.",
            "Choose a split (first/last stage counts or a pipeline layout) whose stages each start on a layer that "
            "computes its own top-k.",
            ["pp", "vpp", "pipeline_layout"],
        )
