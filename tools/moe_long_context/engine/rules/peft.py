"""Megatron Bridge's LoRA (``cfg.peft``): what the adapters require of the layout, and what the engine models.

Bridge 0.6.2 wraps every target linear in a ``ParallelLinearAdapter`` (peft/utils.py:896-1060). For a
column-parallel base (linear_qkv, linear_fc1, in_proj) the adapter's linear_in is a ``ColumnParallelLinear`` from
the input width to the rank, so the rank is split over the base's TP group (ETP for routed experts) and Megatron Core
asserts it divides (tensor_parallel/layers.py:965). Megatron-LM has no PEFT at all.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...model.lora import layer_adapters
from ..context import Context
from ..findings import Finding
from .table import check, finding


def _column_kinds(ctx: Context) -> set[str]:
    """The split kinds of column-parallel adapters the model gets: dense (TP) and routed experts (ETP)."""
    m, c = ctx.model, ctx.cfg
    kinds = {(t, moe) for t, moe in zip(m.attention_layer_types, m.moe_layers, strict=True)}
    out = set()
    for layer_type, is_moe in kinds:
        for a in layer_adapters(m, layer_type, is_moe, c.lora_target_modules):
            if a.kind in ("column", "column_ln"):
                out.add("dense")
            elif a.kind == "expert" and a.target == "linear_fc1":
                out.add("expert")
    return out


@check("optimizer")
def lora(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.peft != "lora":
        return
    kinds = _column_kinds(ctx)
    for kind, size, name in (("dense", c.tp, "TP"), ("expert", ctx.etp, "ETP")):
        if kind in kinds and c.lora_dim % size:
            yield finding(
                "LORA_DIM_TP",
                f"LoRA rank {c.lora_dim} is not divisible by {name}={size}: the adapters of the column-parallel "
                f"{'routed-expert fc1' if kind == 'expert' else 'linears'} split the rank over {name}, and Megatron "
                "Core asserts it divides.",
                f"Set peft.dim to a multiple of {size}, or lower {name}.",
                ["lora_dim", "etp" if kind == "expert" else "tp"],
            )
    yield finding(
        "LORA_MODELLED",
        f"LoRA rank {c.lora_dim} on {', '.join(c.lora_target_modules)}: the base weights are frozen (BF16 weights, "
        "no gradients or optimizer states), their GEMMs run forward and input gradient only, and the adapters train. "
        "Megatron-LM has no LoRA, so lint hands back no Megatron-LM translation of it.",
        None,
        ["peft", "lora_dim", "lora_target_modules"],
    )
