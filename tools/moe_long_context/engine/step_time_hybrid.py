"""Forward FLOPs per token of the issue-16 layer kinds, for step_time.py: the Mamba-2 SSD scan, the DSA indexer
plus its top-k sparse attention, and nothing for the MLP-only layers of a hybrid stack.

* Mamba-2 SSD with chunk Q, per head (Dao and Gu's chunked algorithm, as ``mamba_chunk_scan_combined`` runs it):
  within a chunk C B^T (Q N) and its product with X (Q P), causal so halved; the chunk state B^T X (N P) and its
  read-out C state (N P). Forward FLOPs per token: 2 x heads x (Q (N + P) / 2 + 2 N P). The conv (d_conv taps per
  channel) is added; in_proj and out_proj are GEMMs counted from the parameters.
* DSA: the indexer scores every earlier key with its heads (q . k per head, causal half): 2 x heads x head_dim x S /
  2; the main attention reads only the top-k keys, so MLA's QK^T and AV run over min(S, topk) keys, not halved
  (a query past position topk always has topk keys).
* Model FLOPs of a hybrid stack are counted as Megatron counts them (``hybrid_flops``: Megatron-LM core_r0.19.0
  training.py:428-545 and 863-899, Megatron Bridge 0.6.2 training/utils/flop_utils.py:655-749): layers by symbol of the
  main pattern plus the MTP block's per depth, a Mamba layer with d_in = 2 x hidden whatever its heads, attention
  with its causal core term, MoE without the router and with LatentMoE's latent experts and projections, logits per
  loss head. Hardware time is computed from the real shapes (step_time.py), not from this count.
* LatentMoE moves and computes routed tokens at the latent width (``moe_layer.py``:481-485, 584-585): dispatch and
  combine of latent tokens, expert GEMMs on them, and the two TP-replicated projections h <-> latent.
"""

from __future__ import annotations

from ..model.params_hybrid import mamba_dims
from ..model.specs import ModelSpec

ASSUMPTION = (
    "Mamba-2 layers: projections as GEMMs plus the SSD scan, 2 x heads x (chunk x (state + head_dim) / 2 + "
    "2 x state x head_dim) per token, at the fitted Mamba scan rate (step_time.MAMBA_SCAN_EFFICIENCY); DSA layers: the indexer's heads x head_dim x S per token "
    "plus MLA attention over the top-k keys; MLP-only hybrid layers have no attention."
)


def mamba_scan_flops_per_token(spec: ModelSpec) -> float:
    heads, head_dim, d_inner, groups, state = mamba_dims(spec)
    q = spec.mamba_chunk_size
    scan = 2 * heads * (q * (state + head_dim) / 2 + 2 * state * head_dim)
    conv = 2 * spec.mamba_conv_kernel * (d_inner + 2 * groups * state)
    return scan + conv


def dsa_flops_per_token(spec: ModelSpec, seq: int) -> float:
    n = spec.num_attention_heads
    indexer = 2 * (spec.dsa_index_n_heads or 0) * (spec.dsa_index_head_dim or 0) * seq / 2
    width = n * (spec.head_dim + (spec.qk_pos_emb_head_dim or 0)) + n * (spec.v_head_dim or 0)
    return indexer + 2 * width * min(seq, spec.dsa_index_topk or seq)


def _megatron_attention_per_token(spec: ModelSpec, seq: int) -> float:
    """attn_layer_flops / total_tokens: QKV and output projections, and 2 x s x heads x head_dim (causal)."""
    n, g, d, h = spec.num_attention_heads, spec.num_query_groups, spec.head_dim, spec.hidden_size
    return 4 * n * d * (h + h * g / n) + 2 * seq * n * d


def _megatron_mamba_per_token(spec: ModelSpec) -> float:
    """mamba_layer_flops / total_tokens, with Megatron's d_in = 2 x hidden."""
    h = spec.hidden_size
    d_in = 2 * h
    heads, _, _, groups, state = mamba_dims(spec)
    return 2 * h * (2 * d_in + 2 * groups * state + heads) + 7 * d_in * state + 2 * d_in * h


def _megatron_moe_per_token(spec: ModelSpec) -> float:
    """moe_layer_flops / total_tokens: routed experts (on latent tokens, plus both projections, for LatentMoE)
    and the shared expert; the router is not counted."""
    h, f, k = spec.hidden_size, spec.moe_ffn_hidden_size, spec.moe_router_topk
    scale = 1.5 if spec.gated_linear_unit else 1.0
    latent = spec.moe_latent_size
    routed = 4 * (latent or h) * f * k * scale + (4 * h * latent if latent else 0)
    return routed + 4 * h * (spec.moe_shared_expert_intermediate_size or 0) * scale


def megatron_hybrid_flops_per_token(spec: ModelSpec, seq: int, mtp_depths: int) -> float:
    """Model FLOPs per token (fwd + bwd) of a hybrid stack, as Megatron-LM and Bridge count them."""
    h = spec.hidden_size
    pattern = (spec.hybrid_layer_pattern or "") + (spec.mtp_block_pattern or "") * mtp_depths
    scale = 1.5 if spec.gated_linear_unit else 1.0
    per_symbol = {
        "*": _megatron_attention_per_token(spec, seq),
        "-": 4 * spec.ffn_hidden_size * h * scale,
        "M": _megatron_mamba_per_token(spec) if spec.has_mamba else 0.0,
        "E": _megatron_moe_per_token(spec) if spec.is_moe else 0.0,
    }
    fwd = sum(per_symbol[s] * pattern.count(s) for s in per_symbol)
    fwd += 2 * h * spec.vocab_size * (1 + mtp_depths)  # logits of the loss and of every MTP depth
    return 3 * fwd


def latent_projection_flops_per_token(spec: ModelSpec) -> float:
    """Forward FLOPs per token of one MoE layer's two LatentMoE projections (h -> latent -> h)."""
    return 2 * 2 * spec.hidden_size * spec.moe_latent_size if spec.moe_latent_size else 0.0


def dsa_gathered_width(spec: ModelSpec) -> int:
    """Elements per token a DSA layer all-gathers over CP: the MLA latent (kv_lora_rank + RoPE dims) and the
    indexer key (dsa.py:1805-1835 gathers K/V in full-sequence order)."""
    return (spec.kv_lora_rank or 0) + (spec.qk_pos_emb_head_dim or 0) + (spec.dsa_index_head_dim or 0)


def mamba_cp_exchange_bytes(spec: ModelSpec, tokens: int, tp: int, cp: int, bytes_act: int = 2) -> float:
    """Bytes a rank sends in one Mamba layer's CP all-to-alls per microbatch, forward and backward (not hidden:
    the conv and SSM wait for them); ``tokens`` are the CP-local tokens of the microbatch."""
    return 2 * tokens * mamba_cp_exchange_width(spec, tp, cp) * bytes_act * (cp - 1) / cp


def mamba_cp_exchange_width(spec: ModelSpec, tp: int, cp: int) -> float:
    """Elements per CP-local token one Mamba layer's CP all-to-alls carry per pass (its share of the in_proj
    output z, x, B, C, dt to head sharding before the conv and SSM, and y back after them), per TP rank.

    Megatron Core 0.19.2 ssm/mamba_context_parallel.py:140-211: B and C are repeated cp / (groups / tp) times
    when the rank's groups are fewer than the CP ranks (:118-133), so each CP rank receives its heads' group
    state; the backward runs the mirrored all-to-alls on the gradients."""
    heads, _, d_inner, groups, state = mamba_dims(spec)
    groups_tp = max(groups // tp, 1)
    repeat = cp // groups_tp if groups_tp < cp else 1
    return (3 * d_inner + heads) / tp + 2 * groups_tp * state * repeat


def hybrid_core_flops_per_token(spec: ModelSpec, layer_type: str, seq: int) -> float | None:
    """Core (non-GEMM) forward FLOPs per token of one layer of these kinds; None for the other layer types."""
    if layer_type == "mamba":
        return mamba_scan_flops_per_token(spec)
    if layer_type == "dsa":
        return dsa_flops_per_token(spec, seq)
    if layer_type == "none":
        return 0.0
    return None
