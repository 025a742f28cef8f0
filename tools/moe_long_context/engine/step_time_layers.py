"""What a layer costs besides its GEMM FLOPs and its collectives: the elementwise traffic of its MLP, and whether
Megatron Core runs it in BF16 under an FP8/FP4 recipe (the step-time model's per-layer inputs)."""

from __future__ import annotations

from ..model.specs import ModelSpec
from .context import Context

# HBM bytes (fwd + bwd, BF16) per element an MLP's elementwise kernels touch, per token and per routed copy: the
# fc1 output (read by the activation, read again and its gradient written in backward), the activation output
# (written, its gradient read) and, for routed copies, the token at the expert's input width (permute and
# unpermute, fwd and bwd).
MLP_ELEMENTWISE_BYTES = {"fc1_out": 6, "act_out": 4, "routed_token": 8}


def mlp_elementwise_bytes(m: ModelSpec, is_moe: bool, layer_type: str) -> tuple[float, float]:
    """HBM bytes per token (fwd + bwd) of one layer's MLP activations: (TP-sharded dense or shared MLP, routed
    expert copies). Their FLOPs are in the GEMM term; this is the elementwise traffic between the GEMMs, which
    grows with top-k x expert width and matters where the GEMMs are fast (FP8/FP4 on Blackwell)."""
    if not m.layer_has_mlp(layer_type):
        return 0.0, 0.0
    b, glu = MLP_ELEMENTWISE_BYTES, 2 if m.gated_linear_unit else 1

    def per_copy(width: int) -> float:
        return b["fc1_out"] * glu * width + b["act_out"] * width

    if not is_moe:
        return per_copy(m.ffn_hidden_size), 0.0
    shared = per_copy(m.moe_shared_expert_intermediate_size) if m.moe_shared_expert_intermediate_size else 0.0
    routed = m.moe_router_topk * (per_copy(m.moe_ffn_hidden_size) + b["routed_token"] * m.moe_token_width)
    return shared, routed


def bf16_edge_layers(ctx: Context) -> frozenset[int]:
    """Decoder layers (0-based) Megatron Core runs outside the FP8/FP4 context: with first_last_layers_bf16, the
    first num_layers_at_start_in_bf16 and the last num_layers_at_end_in_bf16 (fp8_utils.is_first_last_bf16_layer,
    fp4_utils.get_fp4_context). MTP layers take the context with no layer number and stay quantized."""
    c, n = ctx.cfg, ctx.model.num_layers
    if c.precision == "bf16" or not c.first_last_layers_bf16:
        return frozenset()
    start, end = max(0, c.num_layers_at_start_in_bf16), max(0, c.num_layers_at_end_in_bf16)
    return frozenset(i for i in range(n) if i < start or i >= n - end)
