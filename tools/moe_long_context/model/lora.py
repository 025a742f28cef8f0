"""The LoRA adapters Megatron Bridge 0.6.2 puts on a layer: which linears a target name matches and their shapes.

Bridge's ``LoRA.transform`` (peft/lora.py:124-236) matches a target by the module's own name and wraps each match
in a ``ParallelLinearAdapter`` (peft/utils.py:896-1060): linear_in (in -> dim) then linear_out (dim -> out), both
split over the base layer's TP group, so one rank holds dim x (in + out) / TP of each. Routed experts
(``*.mlp.experts.linear_fc1/2``, utils.py:655-680) get one adapter per EP rank shared by its local experts
(``share_expert_adapters`` True by default), split over ETP. Everything else is frozen (peft/base.py:176-193).

The kind decides what the adapter keeps for backward: a column-parallel base (``column``, ``column_ln`` when the
layer norm is fused into it) hands the adapter its input gathered over the sequence-parallel ranks
(``return_layernorm_output_gathered``, utils.py:597-625; the adapter gathers it itself otherwise), which the
adapter's linear_in keeps whole; a row-parallel base hands it the TP-split input the base would have kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from .params_hybrid import mamba_dims
from .specs import ModelSpec

# Bridge LoRA's default targets (peft/lora.py:104-106) and every name the engine can place.
LORA_DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
LORA_TARGETS = (*LORA_DEFAULT_TARGETS, "in_proj", "out_proj")


@dataclass(frozen=True)
class Adapter:
    """One LoRA adapter: the base linear it wraps, its full (unsplit) widths and how it is split."""

    target: str
    in_features: int
    out_features: int
    kind: str  # column_ln | column | row | expert

    def params_per_rank(self, dim: int, tp: int, etp: int) -> float:
        return dim * (self.in_features + self.out_features) / (etp if self.kind == "expert" else tp)


def layer_adapters(
    m: ModelSpec, layer_type: str, is_moe: bool, targets: tuple[str, ...]
) -> tuple[Adapter, ...]:
    """The adapters one decoder layer of this kind gets for ``targets`` (MLA has no linear_qkv: its projections
    have other names, so only linear_proj matches there)."""
    want = set(targets)
    h = m.hidden_size
    out: list[Adapter] = []
    if layer_type == "mamba":
        heads, _, d_inner, groups, state = mamba_dims(m)
        if "in_proj" in want:
            out.append(Adapter("in_proj", h, 2 * d_inner + 2 * groups * state + heads, "column_ln"))
        if "out_proj" in want:
            out.append(Adapter("out_proj", d_inner, h, "row"))
    elif layer_type == "linear":  # Gated DeltaNet
        qk = (m.linear_num_key_heads or 0) * (m.linear_key_head_dim or 0)
        v = (m.linear_num_value_heads or 0) * (m.linear_value_head_dim or 0)
        if "in_proj" in want:
            out.append(
                Adapter("in_proj", h, 2 * qk + 2 * v + 2 * (m.linear_num_value_heads or 0), "column_ln")
            )
        if "out_proj" in want:
            out.append(Adapter("out_proj", v, h, "row"))
    elif layer_type != "none":
        shape = m.attention_shape(layer_type)
        n, d, g, dv = shape.num_attention_heads, shape.head_dim, shape.num_query_groups, shape.value_dim
        if m.is_mla:
            dv = m.v_head_dim or d
        elif "linear_qkv" in want:
            gate = n * dv if m.attention_output_gate else 0
            out.append(Adapter("linear_qkv", h, n * d + gate + g * (d + dv), "column_ln"))
        if "linear_proj" in want:
            out.append(Adapter("linear_proj", n * dv, h, "row"))
    if m.layer_has_mlp(layer_type):
        out += _mlp_adapters(m, is_moe, want)
    return tuple(out)


def _mlp_adapters(m: ModelSpec, is_moe: bool, want: set[str]) -> list[Adapter]:
    glu = 2 if m.gated_linear_unit else 1
    h = m.hidden_size
    out: list[Adapter] = []
    if not is_moe:
        if "linear_fc1" in want:
            out.append(Adapter("linear_fc1", h, glu * m.ffn_hidden_size, "column_ln"))
        if "linear_fc2" in want:
            out.append(Adapter("linear_fc2", m.ffn_hidden_size, h, "row"))
        return out
    shared = m.moe_shared_expert_intermediate_size
    width = m.moe_token_width
    if "linear_fc1" in want:
        if shared:
            out.append(Adapter("linear_fc1", h, glu * shared, "column"))  # shared expert: norm not fused
        out.append(Adapter("linear_fc1", width, glu * m.moe_ffn_hidden_size, "expert"))
    if "linear_fc2" in want:
        if shared:
            out.append(Adapter("linear_fc2", shared, h, "row"))
        out.append(Adapter("linear_fc2", m.moe_ffn_hidden_size, width, "expert"))
    return out


def mtp_adapters(m: ModelSpec, targets: tuple[str, ...]) -> tuple[Adapter, ...]:
    """The adapters of one MTP block: its inner layers' (the block's eh_proj is not a target name)."""
    types, moe = m.attention_layer_types, m.moe_layers
    return tuple(a for i in m.mtp_block_layers for a in layer_adapters(m, types[i], moe[i], targets))
