"""Forward FLOPs per token of the issue-16 layer kinds, for step_time.py: the Mamba-2 SSD scan, the DSA indexer
plus its top-k sparse attention, and nothing for the MLP-only layers of a hybrid stack.

* Mamba-2 SSD with chunk Q, per head (Dao and Gu's chunked algorithm, as ``mamba_chunk_scan_combined`` runs it):
  within a chunk C B^T (Q N) and its product with X (Q P), causal so halved; the chunk state B^T X (N P) and its
  read-out C state (N P). Forward FLOPs per token: 2 x heads x (Q (N + P) / 2 + 2 N P). The conv (d_conv taps per
  channel) is added; in_proj and out_proj are GEMMs counted from the parameters.
* DSA: the indexer scores every earlier key with its heads (q . k per head, causal half): 2 x heads x head_dim x S /
  2; the main attention reads only the top-k keys, so MLA's QK^T and AV run over min(S, topk) keys, not halved
  (a query past position topk always has topk keys).
"""

from __future__ import annotations

from ..model.params_hybrid import mamba_dims
from ..model.specs import ModelSpec

ASSUMPTION = (
    "Mamba-2 layers: projections as GEMMs plus the SSD scan, 2 x heads x (chunk x (state + head_dim) / 2 + "
    "2 x state x head_dim) per token, at the attention rate; DSA layers: the indexer's heads x head_dim x S per token "
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


def dsa_gathered_width(spec: ModelSpec) -> int:
    """Elements per token a DSA layer all-gathers over CP: the MLA latent (kv_lora_rank + RoPE dims) and the
    indexer key (dsa.py:1805-1835 gathers K/V in full-sequence order)."""
    return (spec.kv_lora_rank or 0) + (spec.qk_pos_emb_head_dim or 0) + (spec.dsa_index_head_dim or 0)


def hybrid_core_flops_per_token(spec: ModelSpec, layer_type: str, seq: int) -> float | None:
    """Core (non-GEMM) forward FLOPs per token of one layer of these kinds; None for the other layer types."""
    if layer_type == "mamba":
        return mamba_scan_flops_per_token(spec)
    if layer_type == "dsa":
        return dsa_flops_per_token(spec, seq)
    if layer_type == "none":
        return 0.0
    return None
