"""Parameter counts of the issue-16 layer kinds: a Mamba-2 mixer layer and the DSA lightning indexer.

Mamba-2 follows Megatron Core 0.19.2 ``ssm/mamba_mixer.py``: in_proj h -> 2 d_inner + 2 G N + H (z, x, B, C, dt,
:282), a depthwise causal conv over d_inner + 2 G N channels with bias (conv_bias asserted, :275), A_log, D
(one per head, D_has_hdim False) and dt_bias per head, a gated RMSNorm over d_inner and out_proj d_inner -> h; the
layer's input norm is fused into in_proj. All of it is split by head over TP.

LatentMoE (Nemotron-3 Super/Ultra, ``transformer/moe/moe_layer.py``:264-296, ``transformer/mlp.py``:218-245): the
routed experts' fc1 reads and fc2 writes ``moe_latent_size``-wide tokens; two TP-replicated linears project h to the
latent width before the dispatch and back after the combine. The shared expert stays at h.

The DSA indexer (``transformer/experimental_attention_variant/dsa.py`` DSAIndexer, :1158-1206) adds
linear_wq_b (q_lora_rank -> heads x head_dim), linear_wk (h -> head_dim), a LayerNorm k_norm and
linear_weights_proj (h -> heads), all ``parallel_mode="duplicated"``: every TP rank holds the whole indexer.
"""

from __future__ import annotations

from .specs import ModelSpec


def mamba_dims(spec: ModelSpec) -> tuple[int, int, int, int, int]:
    """(heads H, head dim P, d_inner = H x P, groups G, state N)."""
    heads, head_dim = spec.mamba_num_heads or 0, spec.mamba_head_dim or 0
    return heads, head_dim, heads * head_dim, spec.mamba_num_groups or 0, spec.mamba_state_dim or 0


def mamba_params(spec: ModelSpec) -> tuple[int, int]:
    """(TP-sharded, replicated) parameters of one Mamba-2 layer, its fused input norm included."""
    h = spec.hidden_size
    heads, _, d_inner, groups, state = mamba_dims(spec)
    in_proj = h * (2 * d_inner + 2 * groups * state + heads)
    conv_channels = d_inner + 2 * groups * state
    conv = conv_channels * spec.mamba_conv_kernel + conv_channels  # weight and bias
    per_head = 3 * heads  # A_log, D, dt_bias
    norm = d_inner  # gated RMSNorm weight
    out_proj = d_inner * h
    return in_proj + conv + per_head + norm + out_proj, h * spec.norm_params_per_width


def dsa_indexer_params(spec: ModelSpec) -> int:
    """Parameters of one DSA indexer, replicated on every TP rank."""
    heads, dim = spec.dsa_index_n_heads or 0, spec.dsa_index_head_dim or 0
    q_rank = spec.q_lora_rank or spec.hidden_size
    return q_rank * heads * dim + spec.hidden_size * dim + 2 * dim + spec.hidden_size * heads


def latent_projection_params(spec: ModelSpec) -> int:
    """LatentMoE's fc1_latent_proj (h -> latent) and fc2_latent_proj (latent -> h) of one MoE layer, with biases
    when add_bias_linear: TELinear parallel_mode="duplicated", every TP rank holds both (moe_layer.py:264-296)."""
    latent = spec.moe_latent_size
    if not latent:
        return 0
    h = spec.hidden_size
    return 2 * h * latent + ((latent + h) if spec.add_bias_linear else 0)
