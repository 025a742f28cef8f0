"""What a layer costs besides its GEMM FLOPs and its collectives: the elementwise traffic of its MLP, and whether
Megatron Core runs it in BF16 under an FP8/FP4 recipe (the step-time model's per-layer inputs)."""

from __future__ import annotations

from ..model.lora import layer_adapters
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


# HBM bytes per adapter element (fwd + bwd, BF16) of a LoRA adapter's skinny GEMMs, which are bandwidth-bound at
# rank 32 (2 x rank FLOPs per element read): linear_in reads its input in forward and again for its weight
# gradient, linear_out writes its output and reads the output gradient, and the input gradient is written once.
LORA_BYTES_PER_ELEMENT = 6


def gemm_passes(ctx: Context) -> int:
    """GEMM passes over each base weight per step: forward, input gradient and weight gradient; a LoRA-frozen
    base computes no weight gradient (TE's wgrad runs only for weights that need one)."""
    return 2 if ctx.cfg.peft == "lora" else 3


def lora_traffic_bytes(ctx: Context, layer_type: str, is_moe: bool) -> tuple[float, float]:
    """HBM bytes (fwd + bwd) one layer's LoRA adapters move: (per local token, per routed copy on this rank). A
    column adapter reads the gathered input whole and writes its TP share; a row adapter the reverse."""
    c, tp = ctx.cfg, ctx.cfg.tp
    if c.peft != "lora":
        return 0.0, 0.0
    per_token = per_copy = 0.0
    for a in layer_adapters(ctx.model, layer_type, is_moe, c.lora_target_modules):
        if a.kind == "expert":
            per_copy += LORA_BYTES_PER_ELEMENT * (a.in_features + a.out_features) / ctx.etp
        elif a.kind == "row":
            per_token += LORA_BYTES_PER_ELEMENT * (a.in_features / tp + a.out_features)
        else:
            per_token += LORA_BYTES_PER_ELEMENT * (a.in_features + a.out_features / tp)
    return per_token, per_copy


def lora_params_per_rank(ctx: Context, layers) -> tuple[float, float]:
    """(dense, expert) adapter parameters one rank of a PP stage holding ``layers`` trains."""
    c, m = ctx.cfg, ctx.model
    dense = experts = 0.0
    for i in layers:
        for a in layer_adapters(m, m.attention_layer_types[i], m.moe_layers[i], c.lora_target_modules):
            share = a.params_per_rank(c.lora_dim, c.tp, ctx.etp)
            if a.kind == "expert":
                experts += share
            else:
                dense += share
    return dense, experts
