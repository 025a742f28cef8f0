"""Activation memory per decoder layer: the tensors Megatron Core 0.19 saves for backward, one microbatch.

Each ``Saved`` entry is one tensor (or a group saved together) with its bytes on one rank and the
recompute labels and fine-grained offload modules that free it. The inventory follows the NVIDIA MoE
team's tensor list (yanring/Megatron-MoE-ModelZoo ``deepseek_mem_estimate.py``, reference
memory-model.md 4b/4c) re-checked against the Megatron Core 0.19 modules:

* TE layer specs fuse the input norm into the QKV (GQA), in_proj (Gated DeltaNet) and dense fc1 GEMMs,
  so ``layernorm`` recompute frees only separate norms: MLA's input norm and MoE's pre-MLP norm
  (``transformer_layer.py``: recompute only when the norm is not IdentityOp).
* Output-discarding checkpoints (``layernorm``, ``moe_act``, ``mla_up_proj``, ``gdn_norm_out``) run their
  function without autograd and free the outputs once consumed; with FP8/FP4 Megatron makes the
  consuming GEMMs keep the original (BF16) input so the freed tensor is really gone
  (``set_save_original_input``).
* Without those checkpoints, FP8/FP4 GEMMs keep their input quantized (1 byte per element) instead of
  the BF16 tensor ("FP8 caching of GEMM inputs").
* Sequence-parallel tensors hold tokens / TP rows; head-sharded ones (Q, K, V, attention output, FFN
  intermediates) hold every token of the CP shard and heads / TP. Fused attention keeps no s x s term.
* MoE: drop-less, balanced routing (every EP rank receives top-k x its tokens); probabilities are
  applied inside the expert activation, so the combine keeps nothing large (``experts.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.config import precision_is_quantized
from ..engine.context import Context

BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class Saved:
    """One tensor a layer keeps for its backward pass."""

    name: str
    bytes: float  # per microbatch on this rank
    removed_by: frozenset[str] = frozenset()  # selective recompute labels that free it
    offload: frozenset[str] = frozenset()  # fine-grained offload modules that move it to the CPU
    layer_input: bool = False  # the layer input: the only tensor full recompute keeps


@dataclass(frozen=True)
class Shard:
    """How one microbatch's tensors are cut on this rank."""

    tokens: int  # tokens of one microbatch on this CP rank: seq / CP x MBS
    tp: int
    seq_shards: int  # TP with sequence parallelism, else 1
    etp: int
    quantized: bool  # FP8/FP4 GEMMs keep quantized inputs
    delayed: bool  # FP8 delayed scaling (no save-original-input fix for the output projection)
    recompute: frozenset[str]
    shared_expert_overlap: bool
    pre_mlp_norm_recomputable: bool  # False when a moe_router CUDA graph pins the pre-MLP norm output

    @property
    def seq_tokens(self) -> float:
        """Rows of a sequence-parallel tensor on this rank."""
        return self.tokens / self.seq_shards

    def gemm_input(self) -> int:
        """Bytes per element of a GEMM input the GEMM saves itself (FP8 caching)."""
        return 1 if self.quantized else BF16


def shard_of(ctx: Context) -> Shard:
    c = ctx.cfg
    graph_router = (
        c.cuda_graph_impl == "transformer_engine"
        and "moe_router" in (c.cuda_graph_modules or [])
        and not (
            "moe_preprocess" in (c.cuda_graph_modules or [])
            and (c.dispatcher == "alltoall" or ctx.model.moe_latent_size)  # transformer_layer.py:481-488
            and not (ctx.model.moe_shared_expert_intermediate_size and c.moe_shared_expert_overlap)
        )
    )
    return Shard(
        tokens=(c.seq_len or 0) // c.cp * c.mbs,
        tp=c.tp,
        seq_shards=c.tp if ctx.sequence_parallel else 1,
        etp=ctx.etp,
        quantized=precision_is_quantized(c.precision),
        delayed=c.precision == "fp8-delayed",
        recompute=frozenset(ctx.recompute_modules),
        shared_expert_overlap=bool(
            ctx.model.moe_shared_expert_intermediate_size and c.moe_shared_expert_overlap
        ),
        pre_mlp_norm_recomputable=not graph_router,
    )


def _norm_stats(ctx: Context) -> int:
    """FP32 statistics a norm keeps per row: rsigma (RMSNorm) or mean and rsigma (LayerNorm)."""
    return 2 * FP32 if ctx.model.normalization == "LayerNorm" else FP32


def _heads(n: int, tp: int) -> float:
    """Heads per TP rank; KV groups smaller than TP are replicated (one per rank)."""
    return n / tp if n >= tp else 1


def attention_inventory(ctx: Context, sh: Shard, layer_type: str) -> list[Saved]:
    """Saved tensors of one attention block (norm, projections, core attention, dropout)."""
    m = ctx.model
    h, t = m.hidden_size, sh.tp
    rows, tok = sh.seq_tokens, sh.tokens
    stats = _norm_stats(ctx)
    out = [
        Saved("layer input (residual)", BF16 * h * rows, offload=frozenset({"attn_norm"}), layer_input=True)
    ]
    if layer_type == "linear":
        out += _gated_delta_net(ctx, sh)
    elif m.is_mla:
        out += _mla(ctx, sh)
    else:
        shape = m.attention_shape(layer_type)
        n_r, g_r = _heads(shape.num_attention_heads, t), _heads(shape.num_query_groups, t)
        d, dv = shape.head_dim, shape.value_dim
        out.append(
            Saved(
                "attention norm output (QKV GEMM input, norm fused into it)",
                (sh.gemm_input() * h + stats) * rows,
                offload=frozenset({"qkv_linear"}),
            )
        )
        qkv = BF16 * ((n_r + g_r) * d + g_r * dv) * tok
        if m.qk_layernorm and m.qk_layernorm_full_dim:  # one norm over all heads: one statistic per token
            out.append(
                Saved("Q and K before their full-width norms", (BF16 * d * (n_r + g_r) + 2 * stats) * tok)
            )
        elif m.qk_layernorm:
            out.append(Saved("Q and K before their norms", (BF16 * d + stats) * (n_r + g_r) * tok))
        out.append(Saved("Q, K, V (core-attention inputs)", qkv, offload=frozenset({"core_attn"})))
        if m.attention_output_gate:
            out.append(Saved("attention output gate and gated output", 2 * BF16 * n_r * dv * tok))
        out.append(_attention_output(sh, n_r * dv))
        out.append(
            Saved("softmax statistics (FP32 LSE)", FP32 * n_r * tok, removed_by=frozenset({"core_attn"}))
        )
    out += _dropout(ctx, sh, "attention dropout mask")
    return out


def _attention_output(sh: Shard, width: float) -> Saved:
    """Core-attention output, kept by fused attention and the output projection (one BF16 copy, plus an
    FP8 copy only with delayed scaling, where Megatron does not make linear_proj save the original)."""
    per_token = BF16 * width + (width if sh.quantized and sh.delayed else 0)
    return Saved(
        "attention output (output-projection input)", per_token * sh.tokens, offload=frozenset({"attn_proj"})
    )


def _mla(ctx: Context, sh: Shard) -> list[Saved]:
    m = ctx.model
    h, t = m.hidden_size, sh.tp
    rows, tok = sh.seq_tokens, sh.tokens
    stats = _norm_stats(ctx)
    n_r = m.num_attention_heads / t
    dqk, dr, dv = m.head_dim, m.qk_pos_emb_head_dim or 0, m.v_head_dim or 0
    rkv = m.kv_lora_rank or 0
    up = frozenset({"mla_up_proj"})
    # Two GEMMs read the separate input norm's output; with FP8 each keeps its own 1-byte copy.
    out = [
        Saved(
            "attention norm output (q/kv down-projection input)",
            (BF16 * h + stats) * rows,
            removed_by=frozenset({"layernorm"}),
            offload=frozenset({"qkv_linear"}),
        )
    ]
    if m.q_lora_rank:
        rq = m.q_lora_rank
        out.append(Saved("q down-projection output", BF16 * rq * rows))
        out.append(Saved("q up-projection norm output", (sh.gemm_input() * rq + stats) * rows, removed_by=up))
    out.append(Saved("kv down-projection output", BF16 * (rkv + dr) * rows))
    out.append(Saved("kv up-projection norm output", (sh.gemm_input() * rkv + stats) * rows, removed_by=up))
    qkv = BF16 * n_r * (2 * (dqk + dr) + dv) * tok
    out.append(
        Saved("Q, K, V after up-projection and RoPE", qkv, removed_by=up, offload=frozenset({"core_attn"}))
    )
    out.append(_attention_output(sh, n_r * dv))
    out.append(Saved("softmax statistics (FP32 LSE)", FP32 * n_r * tok, removed_by=frozenset({"core_attn"})))
    return out


def _gated_delta_net(ctx: Context, sh: Shard) -> list[Saved]:
    """Qwen3-Next linear attention (Megatron ``ssm/gated_delta_net``), approximate: the chunked delta-rule
    kernel (fla) keeps q, k, v, the FP32 decay and beta, and a 64-wide FP32 chunk matrix per value head."""
    m = ctx.model
    h, t = m.hidden_size, sh.tp
    rows, tok = sh.seq_tokens, sh.tokens
    qk = (m.linear_num_key_heads or 0) * (m.linear_key_head_dim or 0) / t
    v = (m.linear_num_value_heads or 0) * (m.linear_value_head_dim or 0) / t
    nv = (m.linear_num_value_heads or 0) / t
    return [
        Saved(
            "norm output (in_proj input, norm fused into it)",
            (sh.gemm_input() * h + _norm_stats(ctx)) * rows,
            offload=frozenset({"qkv_linear"}),
        ),
        Saved("in_proj output: conv input and output gate", BF16 * (2 * qk + 2 * v) * tok),
        Saved(
            "conv output and L2-normalised q, k (delta-rule inputs)",
            BF16 * (4 * qk + v) * tok,
            offload=frozenset({"core_attn"}),
        ),
        Saved("delta-rule decay, beta and chunk matrix (FP32)", FP32 * nv * (2 + 64) * tok),
        Saved("delta-rule output (gated-norm input)", BF16 * v * tok),
        Saved(
            "gated norm output (out_proj input)",
            sh.gemm_input() * v * tok,
            removed_by=frozenset({"gdn_norm_out"}),
            offload=frozenset({"attn_proj"}),
        ),
    ]


def _dropout(ctx: Context, sh: Shard, name: str) -> list[Saved]:
    if ctx.model.hidden_dropout <= 0:
        return []
    return [Saved(name, 1 * ctx.model.hidden_size * sh.seq_tokens)]


def dense_mlp_inventory(ctx: Context, sh: Shard) -> list[Saved]:
    """Saved tensors of a dense MLP (norm fused into fc1); ``mlp`` recompute keeps only its input."""
    m = ctx.model
    h, t = m.hidden_size, sh.tp
    rows, tok = sh.seq_tokens, sh.tokens
    ffn = m.ffn_hidden_size
    fc1 = (2 if m.gated_linear_unit else 1) * ffn
    mlp = frozenset({"mlp"})
    out = [
        Saved("MLP input (residual)", BF16 * h * rows, offload=frozenset({"mlp_norm"})),
        Saved(
            "MLP norm output (fc1 input, norm fused into it)",
            (sh.gemm_input() * h + _norm_stats(ctx)) * rows,
            removed_by=mlp,
        ),
        Saved("MLP fc1 output (activation input)", BF16 * fc1 / t * tok, removed_by=mlp),
        Saved("MLP activation output (fc2 input)", sh.gemm_input() * ffn / t * tok, removed_by=mlp),
    ]
    return out + _dropout(ctx, sh, "MLP dropout mask")


def moe_inventory(ctx: Context, sh: Shard) -> list[Saved]:
    """Saved tensors of an MoE block: separate pre-MLP norm, router, permuted tokens, grouped expert GEMMs,
    shared experts. ``moe`` recompute keeps only the norm output it takes as input."""
    m = ctx.model
    h, t = m.hidden_size, sh.tp
    rows, tok = sh.seq_tokens, sh.tokens
    k, f, e = m.moe_router_topk, m.moe_ffn_hidden_size, m.num_experts
    w = m.moe_token_width  # LatentMoE: the experts read and write latent tokens
    moe = frozenset({"moe"})
    norm_labels = frozenset({"layernorm"}) if sh.pre_mlp_norm_recomputable else frozenset()
    fc1 = (2 if m.gated_linear_unit else 1) * f
    out = [
        Saved("MoE input (residual)", BF16 * h * rows, offload=frozenset({"mlp_norm"})),
        Saved(
            "pre-MLP norm output (router and expert input)",
            (BF16 * h + _norm_stats(ctx)) * rows,
            removed_by=norm_labels,
        ),
        # table 4b: BF16 router probabilities (2E) and the int64 permutation map (8E) per token
        Saved("router probabilities and permutation map", 10 * e * rows, removed_by=moe),
        Saved(
            "permuted tokens (expert fc1 input)",
            sh.gemm_input() * k * w * sh.etp * rows,
            removed_by=moe,
            offload=frozenset({"expert_fc1", "fused_group_mlp"}),
        ),
        Saved(
            "expert fc1 output (activation input)",
            BF16 * k * fc1 * rows,
            removed_by=moe,
            offload=frozenset({"moe_act", "fused_group_mlp"}),
        ),
        Saved(
            "expert activation output (fc2 input)",
            sh.gemm_input() * k * f * rows,
            removed_by=frozenset({"moe_act", "moe"}),
            offload=frozenset({"fused_group_mlp"}),
        ),
        Saved("routing weights per token-expert pair (FP32)", FP32 * k * rows, removed_by=moe),
    ]
    if (
        m.moe_latent_size
    ):  # fc2_latent_proj keeps its input, the combined latent tokens (moe_layer.py:584-585)
        out.append(
            Saved(
                "combined latent tokens (fc2_latent_proj input)", sh.gemm_input() * w * rows, removed_by=moe
            )
        )
    fs = m.moe_shared_expert_intermediate_size or 0
    if fs:
        shared = frozenset({"shared_experts", "moe"})
        if sh.shared_expert_overlap and sh.seq_shards > 1:
            out.append(
                Saved(
                    "shared-expert input gathered over TP (shared-expert overlap)",
                    sh.gemm_input() * h * tok,
                    removed_by=shared,
                )
            )
        elif sh.quantized:
            out.append(
                Saved("shared-expert fc1 input (FP8 copy)", 1 * h * rows, removed_by=shared | norm_labels)
            )
        fs_fc1 = (2 if m.gated_linear_unit else 1) * fs
        out.append(Saved("shared-expert fc1 output", BF16 * fs_fc1 / t * tok, removed_by=shared))
        out.append(
            Saved(
                "shared-expert activation output (fc2 input)",
                sh.gemm_input() * fs / t * tok,
                removed_by=shared,
            )
        )
    return out + _dropout(ctx, sh, "MoE dropout mask")


def layer_inventory(ctx: Context, sh: Shard, index: int) -> list[Saved]:
    """Every saved tensor of decoder layer ``index`` (0-based) for one microbatch on this rank."""
    m = ctx.model
    attention = attention_inventory(ctx, sh, m.attention_layer_types[index])
    mlp = moe_inventory(ctx, sh) if m.moe_layers[index] else dense_mlp_inventory(ctx, sh)
    return attention + mlp


def kept(inventory: list[Saved], recompute: frozenset[str], offload: frozenset[str]) -> float:
    """Bytes that stay on the GPU once the layer's forward is done."""
    return sum(s.bytes for s in inventory if not (s.removed_by & recompute) and not (s.offload & offload))


def removed(inventory: list[Saved], recompute: frozenset[str]) -> float:
    """Bytes selective recompute frees (and re-materialises during this layer's backward)."""
    return sum(s.bytes for s in inventory if s.removed_by & recompute)
