"""Parameter counts of a ModelSpec, per layer and in total.

Formulas follow Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (core_r0.19.0) for
GQA, MLA, dense and MoE MLPs, extended with what that file leaves out: biases (gpt-oss), attention
sinks, Q/K norms (per head, or over all heads as OLMoE and MiniMax-M2 have them), Q/K/V-only biases, the
attention output gate, per-layer-type head shapes (Gemma-4, Step-3.5, MiMo-V2-Flash), a V narrower than Q and K,
Gated DeltaNet layers (Qwen3-Next), LatentMoE (experts on latent tokens, params_hybrid.py)
and the MTP block (``eh_proj`` plus two norms plus one transformer layer or a Nemotron-H block's layers).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from .params_hybrid import dsa_indexer_params, latent_projection_params, mamba_params
from .specs import ModelSpec


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one decoder layer, split by how Megatron shards them."""

    attention: int  # attention block weights, sharded over TP
    mlp: int  # dense MLP or shared expert(s), sharded over TP
    experts: int  # routed experts, sharded over EP x ETP
    replicated: int  # norms, router, gates, LatentMoE projections: replicated on every TP rank
    active_experts: int  # routed-expert weights one token passes through
    replicated_gemm: int = 0  # the GEMM weights among ``replicated`` (LatentMoE projections)

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.experts + self.replicated

    @property
    def active(self) -> int:
        return self.attention + self.mlp + self.active_experts + self.replicated


def attention_params(spec: ModelSpec, layer_type: str) -> tuple[int, int]:
    """(TP-sharded weights, replicated weights) of one attention block, its input norm included."""
    h = spec.hidden_size
    n = spec.num_attention_heads
    norm = spec.norm_params_per_width
    replicated = h * norm  # input norm
    if layer_type == "mamba":
        return mamba_params(spec)
    if layer_type == "none":  # an MLP-only layer of a hybrid stack: its norm is the MLP's
        return 0, 0
    if layer_type == "dsa":
        sharded, mla_replicated = attention_params(spec, "full")
        return sharded, mla_replicated + dsa_indexer_params(spec)
    if layer_type == "linear":
        nk, nv = spec.linear_num_key_heads or 0, spec.linear_num_value_heads or 0
        dk, dv = spec.linear_key_head_dim or 0, spec.linear_value_head_dim or 0
        qk_dim, v_dim = nk * dk, nv * dv
        in_proj = h * (2 * qk_dim + 2 * v_dim + 2 * nv)  # q, k, v, z and the b, a gates
        conv = (spec.linear_conv_kernel_dim or 0) * (2 * qk_dim + v_dim)
        out_proj = v_dim * h
        replicated += 2 * nv + dv * norm  # A_log, dt_bias, gated norm weight
        return in_proj + conv + out_proj, replicated
    if spec.is_mla:
        dqk, dr, dv = spec.head_dim, spec.qk_pos_emb_head_dim or 0, spec.v_head_dim or 0
        kv_lora = spec.kv_lora_rank or 0
        if spec.q_lora_rank:
            q = h * spec.q_lora_rank + spec.q_lora_rank * n * (dqk + dr)
            replicated += spec.q_lora_rank * norm  # q_a_layernorm
        else:
            q = h * n * (dqk + dr)
        kv = h * (kv_lora + dr) + kv_lora * n * (dqk + dv)
        replicated += kv_lora * norm  # kv_a_layernorm
        proj = n * dv * h
        return q + kv + proj, replicated
    shape = spec.attention_shape(layer_type)
    n, d, g, dv = shape.num_attention_heads, shape.head_dim, shape.num_query_groups, shape.value_dim
    gate = n * dv if spec.attention_output_gate else 0
    qkv_width = n * d + gate + g * (d + dv)
    sharded = h * qkv_width + n * dv * h  # linear_qkv and linear_proj
    if spec.add_bias_linear or spec.add_qkv_bias:
        sharded += qkv_width  # linear_qkv bias
    if spec.add_bias_linear:
        replicated += h  # output-projection bias
    if shape.softmax_sinks:
        sharded += n
    if spec.qk_layernorm and spec.qk_layernorm_full_dim:
        sharded += (n * d + g * d) * norm  # one norm over all query heads, one over all key heads
    elif spec.qk_layernorm:
        replicated += 2 * d * norm
    return sharded, replicated


def megatron_only_params(spec: ModelSpec, layer_type: str) -> int:
    """Weights Megatron allocates in one attention block that the Hugging Face checkpoint does not hold:
    the V slice of linear_qkv on k = v layers (Gemma-4, which Bridge ties to K), and the full-width output
    gate Bridge builds from a head-wise one (Step-3.5 on Megatron Core 0.19.2, which has no head-wise gate)."""
    if layer_type not in ("full", "sliding") or spec.is_mla:
        return 0
    shape = spec.attention_shape(layer_type)
    h, n, g, dv = spec.hidden_size, shape.num_attention_heads, shape.num_query_groups, shape.value_dim
    extra = 0
    if shape.k_eq_v:
        extra += h * g * dv + (g * dv if spec.add_bias_linear or spec.add_qkv_bias else 0)
    if spec.attention_output_gate and spec.attention_output_gate_head_wise:
        extra += h * n * dv - h * n
    return extra


def _ffn(spec: ModelSpec, width: int, io: int | None = None) -> int:
    """An MLP of FFN width ``width`` reading and writing ``io``-wide tokens (hidden unless given)."""
    io = spec.hidden_size if io is None else io
    factor = 3 if spec.gated_linear_unit else 2
    weights = factor * io * width
    if spec.add_bias_linear:
        weights += (factor - 1) * width + io
    return weights


def mlp_params(spec: ModelSpec, is_moe: bool, layer_type: str = "full") -> tuple[int, int, int, int]:
    """(TP-sharded dense/shared, routed experts, active routed experts, replicated) of one MLP block; zeros for a
    hybrid stack's mixer layers, which have none (``layer_type`` says which layer kind it is)."""
    if not spec.layer_has_mlp(layer_type):
        return 0, 0, 0, 0
    h = spec.hidden_size
    replicated = h * spec.norm_params_per_width  # pre-MLP norm
    if not is_moe:
        return _ffn(spec, spec.ffn_hidden_size), 0, 0, replicated
    expert = _ffn(spec, spec.moe_ffn_hidden_size, spec.moe_token_width)  # LatentMoE: experts on latent tokens
    experts = spec.num_experts * expert
    active = spec.moe_router_topk * expert
    replicated += h * spec.num_experts  # router
    replicated += latent_projection_params(spec)
    if spec.add_bias_linear:
        replicated += spec.num_experts  # router bias (gpt-oss)
    # a sigmoid router's expert-bias correction is a buffer, not a parameter, in Megatron (TopKRouter expert_bias)
    # and in the checkpoint (e_score_correction_bias): no optimizer state, and no part of any published count
    shared = 0
    if spec.moe_shared_expert_intermediate_size:
        shared = _ffn(spec, spec.moe_shared_expert_intermediate_size)
        if spec.moe_shared_expert_gate:
            replicated += h
    return shared, experts, active, replicated


_SPEC_CACHES: dict[int, tuple[weakref.ref, dict]] = {}


def spec_cache(spec: ModelSpec) -> dict:
    """A dict of derived values kept for as long as ``spec`` lives (ModelSpec holds a dict, so it cannot be a
    dict key itself); planning asks for the same derived numbers thousands of times."""
    key = id(spec)
    entry = _SPEC_CACHES.get(key)
    if entry is not None and entry[0]() is spec:
        return entry[1]
    cache: dict = {}
    _SPEC_CACHES[key] = (weakref.ref(spec, lambda _ref: _SPEC_CACHES.pop(key, None)), cache)
    return cache


def _compute_layer(spec: ModelSpec, index: int) -> LayerParams:
    attn, attn_rep = attention_params(spec, spec.attention_layer_types[index])
    is_moe, layer_type = spec.moe_layers[index], spec.attention_layer_types[index]
    shared, experts, active, mlp_rep = mlp_params(spec, is_moe, layer_type)
    latent = latent_projection_params(spec) if is_moe and spec.layer_has_mlp(layer_type) else 0
    return LayerParams(attn, shared, experts, attn_rep + mlp_rep, active, replicated_gemm=latent)


def layer_table(spec: ModelSpec) -> tuple[LayerParams, ...]:
    """Every decoder layer's parameters, computed once per ModelSpec."""
    cache = spec_cache(spec)
    if "layer_table" not in cache:
        cache["layer_table"] = tuple(_compute_layer(spec, i) for i in range(spec.num_layers))
    return cache["layer_table"]


def layer_params(spec: ModelSpec, index: int) -> LayerParams:
    """Parameters of decoder layer ``index`` (0-based)."""
    return layer_table(spec)[index]


def mtp_layer_params(spec: ModelSpec) -> LayerParams:
    """One MTP module: two input norms, eh_proj (2h -> h), its inner layers (one like ``mtp_layer_index``, or a
    Nemotron-H block's pattern layers, multi_token_prediction.py:983-1050), a final norm."""
    inner = [layer_params(spec, i) for i in spec.mtp_block_layers]
    h = spec.hidden_size
    return LayerParams(
        attention=sum(lp.attention for lp in inner) + 2 * h * h,
        mlp=sum(lp.mlp for lp in inner),
        experts=sum(lp.experts for lp in inner),
        replicated=sum(lp.replicated for lp in inner) + 3 * h * spec.norm_params_per_width,
        active_experts=sum(lp.active_experts for lp in inner),
        replicated_gemm=sum(lp.replicated_gemm for lp in inner),
    )


def position_embedding_params(spec: ModelSpec) -> int:
    """A learned absolute position table (first stage only); RoPE has no parameters."""
    if spec.position_embedding_type != "learned_absolute":
        return 0
    return (spec.max_position_embeddings or 0) * spec.hidden_size


@dataclass(frozen=True)
class ModelParams:
    """Whole-model parameter counts, as Megatron allocates them."""

    total: int  # decoder + embeddings + final norm, MTP excluded (as model cards count)
    active: int  # what one token passes through, embeddings included
    embedding: int  # input embedding (+ output layer when untied, + learned position table)
    experts: int  # routed experts over all MoE layers
    mtp: int  # the MTP modules' weights (one block when it is repeated), not in total
    megatron_only: int = 0  # in total and active, but not in the checkpoint (megatron_only_params)

    @property
    def checkpoint_total(self) -> int:
        """What the Hugging Face checkpoint holds: the figure a model card publishes."""
        return self.total - self.megatron_only

    @property
    def checkpoint_active(self) -> int:
        return self.active - self.megatron_only


def model_params(spec: ModelSpec) -> ModelParams:
    layers = [layer_params(spec, i) for i in range(spec.num_layers)]
    embedding = spec.hidden_size * spec.vocab_size * (1 if spec.tie_embeddings else 2)
    embedding += position_embedding_params(spec)
    final_norm = spec.hidden_size * spec.norm_params_per_width
    total = sum(lp.total for lp in layers) + embedding + final_norm
    active = sum(lp.active for lp in layers) + embedding + final_norm
    experts = sum(lp.experts for lp in layers)
    mtp = spec.mtp_weight_blocks(spec.mtp_num_layers) * mtp_layer_params(spec).total
    extra = sum(megatron_only_params(spec, t) for t in spec.attention_layer_types)
    return ModelParams(
        total=total, active=active, embedding=embedding, experts=experts, mtp=mtp, megatron_only=extra
    )
