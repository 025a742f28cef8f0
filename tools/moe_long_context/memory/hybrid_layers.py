"""Activation terms of the issue-16 layer kinds: Mamba-2 mixer layers and MLP-only layers of a hybrid stack, and
the DSA lightning indexer on top of MLA. One microbatch on one rank, bytes; each term says what it assumes.

Mamba-2 (Megatron Core 0.19.2 ``ssm/mamba_mixer.py``, training path ``_ssm_training`` :728-780): in_proj (input norm
fused, TE) writes z, x, B, C, dt; under CP an all-to-all (``ssm/mamba_context_parallel.py`` :159-197) turns the
sequence shard into a head shard over the whole sequence, so a rank holds heads / (TP x CP) for all S tokens - the
same bytes as S / CP tokens x heads / TP, except that B and C are repeated when groups / TP < CP (:119-124). The
memory-efficient kernel ``mamba_split_conv1d_scan_combined`` saves its input (z x B C dt) and, as Megatron Core
gives it z and no norm weight, the scan output before the z gate (``out_x``, mamba_ssm ``ssd_combined.py``
MambaSplitConv1dScanCombinedFn), and recomputes the conv and the chunk states in backward; its gated output goes on
to the norm, which keeps it; the gated RMSNorm and out_proj keep their inputs. No
selective-recompute label reaches a Mamba layer (``transformer_config.py`` :546-561 has none), so only full
recompute frees these. The SSD scan materialises FP32 inter-chunk states [S / chunk, heads, head_dim, state] per
rank while it runs (forward, and again in backward): a transient of one layer, not a saved tensor. Conv and SSM
*states* as such exist only at inference (``mamba_states_cache``, :484-535) and are not training memory.

DSA (``transformer/experimental_attention_variant/dsa.py``): the indexer's autograd function saves its q, head
weights and k, the attention query/key it detaches (no copy) and the int64 top-k indices [b, S/CP, topk] (:944). With
CP (allgather only) k and the MLA latent K/V are gathered over the whole sequence (:1805-1835). The FP32 index
scores [b, S/CP, S] are never kept: the cuDNN backend every Bridge GLM-5 recipe selects computes them in chunks of
at most 1 GiB and its top-k in at most 2 GiB of scratch (``dsa_cudnn_kernels.py`` :132, :135).
"""

from __future__ import annotations

from ..engine.context import Context
from ..model.lora import layer_adapters
from ..model.params_hybrid import mamba_dims
from . import activations
from .activations import (
    BF16,
    FP32,
    Saved,
    Shard,
    _norm_stats,
    attention_inventory,
    dense_mlp_inventory,
    moe_inventory,
)

INT64 = 8
DSA_SCORE_CHUNK_BYTES = 1 << 30  # dsa_cudnn_kernels.py:135 _INDEXER_SCORE_CHUNK_MAX_BYTES
DSA_TOPK_SCRATCH_BYTES = 2 << 30  # dsa_cudnn_kernels.py:132 _TOPK_WRAPPER_MAX_SCRATCH_BYTES


def _cp(ctx: Context) -> int:
    return ctx.cfg.cp


def mamba_group_width(ctx: Context, tp: int) -> float:
    """B and C groups a rank holds per token of its CP shard: G / TP, or at least one group replicated over the
    whole sequence when G / TP < CP."""
    _, _, _, groups, _ = mamba_dims(ctx.model)
    cp = _cp(ctx)
    per_tp = groups / tp
    return per_tp if per_tp >= cp else cp  # one group per rank over S tokens = CP groups per S/CP tokens


def mamba_inventory(ctx: Context, sh: Shard) -> list[Saved]:
    m = ctx.model
    h, t = m.hidden_size, sh.tp
    rows, tok = sh.seq_tokens, sh.tokens
    heads, _, d_inner, _, state = mamba_dims(m)
    groups = mamba_group_width(ctx, t)
    zxbcdt = (2 * d_inner + heads) / t + 2 * groups * state
    return [
        Saved("layer input (residual)", BF16 * h * rows, layer_input=True),
        Saved(
            "Mamba norm output (in_proj input, norm fused into it)",
            (sh.gemm_input() * h + _norm_stats(ctx)) * rows,
        ),
        Saved("Mamba in_proj output z, x, B, C, dt (scan input, head-sharded)", BF16 * zxbcdt * tok),
        Saved("Mamba scan output before the z gate (the kernel keeps it for dz)", BF16 * d_inner / t * tok),
        Saved("Mamba scan output (gated y, norm input)", BF16 * d_inner / t * tok),
        Saved("Mamba gated-norm statistics (FP32)", FP32 * max(1.0, (m.mamba_num_groups or 1) / t) * tok),
        Saved("Mamba norm output (out_proj input)", sh.gemm_input() * d_inner / t * tok),
    ]


def dsa_inventory(ctx: Context, sh: Shard) -> list[Saved]:
    """What a DSA layer keeps beyond its MLA inventory."""
    m = ctx.model
    tok = sh.tokens
    n, d = m.dsa_index_n_heads or 0, m.dsa_index_head_dim or 0
    keys = tok * _cp(ctx)  # allgather CP: k for every position of the sequence
    out = [
        Saved("DSA indexer q and head weights (TP-replicated)", BF16 * (n * d + n) * tok),
        Saved("DSA indexer k over the whole sequence (allgather CP)", BF16 * d * keys),
    ]
    if _cp(ctx) > 1:
        latent = (m.kv_lora_rank or 0) + (m.qk_pos_emb_head_dim or 0)
        out.append(Saved("MLA latent K/V gathered over the sequence (allgather CP)", BF16 * latent * keys))
    out.append(Saved("DSA top-k indices (int64)", INT64 * (m.dsa_index_topk or 0) * tok))
    return out


def dsa_transient(ctx: Context, sh: Shard) -> float:
    """Bytes the indexer holds while it scores one layer: an FP32 score chunk and the top-k scratch, each at most
    the cuDNN backend's cap, or the whole [b, S/CP, S] score matrix when that is smaller."""
    scores = FP32 * sh.tokens * sh.tokens * _cp(ctx)
    return min(scores, DSA_SCORE_CHUNK_BYTES) + min(scores, DSA_TOPK_SCRATCH_BYTES)


def mamba_transient(ctx: Context, sh: Shard) -> float:
    """FP32 inter-chunk SSM states of one Mamba layer's scan on this rank (whole sequence, heads / (TP x CP))."""
    m = ctx.model
    heads, head_dim, _, _, state = mamba_dims(m)
    seq_tokens = sh.tokens * _cp(ctx)
    chunks = -(-seq_tokens // m.mamba_chunk_size)
    return FP32 * chunks * heads / (sh.tp * _cp(ctx)) * head_dim * state


def kind_transient(ctx: Context, sh: Shard, layer_types: set[str]) -> tuple[float, str]:
    """The largest per-layer transient of the layer kinds a rank holds, and what it is."""
    options = []
    if "dsa" in layer_types:
        options.append(
            (dsa_transient(ctx, sh), "DSA indexer FP32 score chunk and top-k scratch (cuDNN backend)")
        )
    if "mamba" in layer_types:
        options.append((mamba_transient(ctx, sh), "Mamba SSD inter-chunk states (FP32) of one layer's scan"))
    return max(options, default=(0.0, ""))


def hybrid_layer_inventory(ctx: Context, sh: Shard, layer_type: str, is_moe: bool) -> list[Saved] | None:
    """A hybrid stack's layer, or None when the layer is not one of this module's kinds."""
    m = ctx.model
    if layer_type == "dsa":
        mlp = moe_inventory(ctx, sh) if is_moe else dense_mlp_inventory(ctx, sh)
        return attention_inventory(ctx, sh, "full") + dsa_inventory(ctx, sh) + mlp
    if not m.is_hybrid:
        return None
    if layer_type == "mamba":
        return mamba_inventory(ctx, sh)
    if layer_type == "none":  # MLP-only layer: its MLP input is the layer input
        mlp = moe_inventory(ctx, sh) if is_moe else dense_mlp_inventory(ctx, sh)
        first = mlp[0]
        return [Saved(first.name, first.bytes, first.removed_by, first.offload, layer_input=True), *mlp[1:]]
    return attention_inventory(ctx, sh, layer_type)  # attention-only layer


def layer_inventory(ctx: Context, sh: Shard, index: int) -> list[Saved]:
    """Every saved tensor of decoder layer ``index``: this module's layer kinds, else activations.py's."""
    m = ctx.model
    layer_type, is_moe = m.attention_layer_types[index], m.moe_layers[index]
    hybrid = hybrid_layer_inventory(ctx, sh, layer_type, is_moe)
    saved = hybrid if hybrid is not None else activations.layer_inventory(ctx, sh, index)
    return saved + lora_inventory(ctx, sh, layer_type, is_moe) if ctx.cfg.peft == "lora" else saved


def lora_inventory(ctx: Context, sh: Shard, layer_type: str, is_moe: bool) -> list[Saved]:
    """What LoRA adds to a layer's saved tensors. A frozen TE linear keeps no input (TE 2.14 saves it only when
    the weight needs a gradient, ``backward_needs_input``); its adapter's linear_in keeps the same input instead,
    whole over the sequence for a column-parallel base (the gathered norm output), and linear_out keeps the
    rank-dim intermediate. So the change from full training is the gathered copy's other TP shards and the
    intermediates; an MLP's adapters go with the MLP's recompute label."""
    m, c = ctx.model, ctx.cfg
    found: dict[tuple[str, frozenset[str]], float] = {}
    for a in layer_adapters(m, layer_type, is_moe, c.lora_target_modules):
        labels: frozenset[str] = frozenset()
        if a.target in ("linear_fc1", "linear_fc2"):
            labels = frozenset({"moe"} if a.kind == "expert" else {"moe", "shared_experts"}) if is_moe else (
                frozenset({"mlp"}))  # fmt: skip
        if a.kind == "expert":
            rows = m.moe_router_topk * sh.etp * sh.seq_tokens  # routed copies, as the expert GEMMs see them
            key = ("LoRA: rank-dim intermediates", labels)
            found[key] = found.get(key, 0.0) + BF16 * c.lora_dim * rows
            continue
        if a.kind in ("column", "column_ln") and sh.seq_shards > 1:
            key = ("LoRA: gathered inputs of column-parallel adapters (other TP shards)", labels)
            found[key] = found.get(key, 0.0) + BF16 * a.in_features * (sh.tokens - sh.seq_tokens)
        key = ("LoRA: rank-dim intermediates", labels)
        found[key] = found.get(key, 0.0) + BF16 * c.lora_dim * sh.tokens
    return [Saved(name, amount, removed_by=labels) for (name, labels), amount in found.items()]


def assumptions(ctx: Context) -> list[str]:
    m = ctx.model
    out = []
    if m.moe_latent_size:
        out.append(
            f"LatentMoE: the router and shared expert read h = {m.hidden_size}; the dispatched tokens, the expert "
            f"GEMM inputs and outputs and the combined tokens (fc2_latent_proj input) are {m.moe_latent_size} wide; "
            "the two latent projections are replicated on every TP rank."
        )
    if m.has_mamba:
        out.append(
            "Mamba-2 layers: in_proj output (z, x, B, C, dt), scan output and the gated-norm and out_proj inputs are "
            "kept (mamba_split_conv1d_scan_combined recomputes the conv and chunk states); no selective label frees "
            "them. Transient: FP32 inter-chunk SSM states of one layer, S / chunk x heads / (TP x CP) x head_dim x "
            "state. Conv/SSM states are inference-only."
        )
    if m.has_dsa:
        out.append(
            "DSA layers: MLA inventory (expanded Q/K/V, an upper bound for the absorbed kernel) plus the indexer's "
            "q, head weights, whole-sequence k, int64 top-k indices and, with CP (allgather), the gathered MLA "
            "latent K/V. Transient: the cuDNN backend's FP32 index-score chunk (<= 1 GiB) and top-k scratch "
            "(<= 2 GiB); the full [b, S/CP, S] scores are never kept."
        )
    if ctx.cfg.peft == "lora":
        out.append(
            "LoRA: frozen linears keep no input of their own; each adapter keeps the input its base would have kept, "
            "gathered over the sequence-parallel ranks for a column-parallel base, and its rank-dim intermediate. "
            "The inputs of frozen linears no adapter wraps (router, LatentMoE projections, output layer) are still "
            "counted as in full training: an upper bound."
        )
    return out
