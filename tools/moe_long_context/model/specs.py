"""Model and GPU specifications: the constants every rule and estimate reads.

Both are frozen pydantic models built by the catalog loader (``catalog/``) from YAML presets or a
Hugging Face ``config.json``; ``sources`` says where each value came from.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AttentionKind = Literal["gqa", "mla"]
AttentionLayerType = Literal["full", "sliding", "linear", "dsa", "mamba", "none"]
Normalization = Literal["RMSNorm", "LayerNorm"]
PositionEmbedding = Literal["rope", "learned_absolute"]


HYBRID_FAMILIES = ("glm_moe_dsa", "deepseek_v32", "nemotron_h")


class AttentionShape(BaseModel):
    """The head geometry of one kind of softmax-attention layer. The trunk fields of ModelSpec give it for
    every layer; ``ModelSpec.attention_shapes`` overrides it for the layers of one type where a family mixes
    two shapes, as Bridge's custom layers build them (Gemma-4's global layers, Step-3.5's sliding layers,
    MiMo-V2-Flash's sliding-window layers)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_attention_heads: int = Field(gt=0, description="Query heads of these layers.")
    num_query_groups: int = Field(gt=0, description="Key/value heads of these layers.")
    head_dim: int = Field(gt=0, description="Q and K head dim (kv_channels) of these layers.")
    v_head_dim: int | None = Field(
        default=None,
        gt=0,
        description="V head dim where it differs from head_dim (MiMo-V2-Flash: 128 vs 192).",
    )
    softmax_sinks: bool = Field(
        default=False,
        description="Learned attention sinks on these layers (TE context parallelism needs a2a).",
    )
    k_eq_v: bool = Field(
        default=False,
        description="The checkpoint has no V projection: V is K (Gemma-4 attention_k_eq_v). Megatron still "
        "allocates the V slice of linear_qkv, so it counts in memory, not in the published total.",
    )

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @model_validator(mode="after")
    def _groups_divide_heads(self) -> AttentionShape:
        if self.num_attention_heads % self.num_query_groups:
            raise ValueError(
                f"num_query_groups={self.num_query_groups} must divide num_attention_heads={self.num_attention_heads}"
            )
        return self


class ModelSpec(BaseModel):
    """Architecture of one language model in Megatron Core's terms: an MoE model from the catalog, or a
    dense Megatron GPT (family ``gpt``, ``num_experts=0``) built directly, e.g. for calibration tests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Catalog id, e.g. deepseek-v3; 'custom' for an inline config.json.")
    name: str = Field(description="Human-readable name.")
    family: str = Field(
        description="Hugging Face architecture family the spec was converted from (model/hf.py "
        "FAMILY_BY_MODEL_TYPE and model/hf_families.yaml name them); gpt for a plain Megatron GPT spec built "
        "directly (the only family that may be dense); custom for a spec written as YAML fields.",
        min_length=1,
    )
    hf_repo: str | None = Field(default=None, description="Hugging Face repository of the config.json.")
    aliases: tuple[str, ...] = Field(default=(), description="Other names accepted for this model.")

    # Trunk
    num_layers: int = Field(gt=0, description="Decoder layers (Megatron num_layers), MTP not included.")
    hidden_size: int = Field(gt=0, description="Model width h.")
    vocab_size: int = Field(gt=0, description="Vocabulary size before Megatron's padding.")
    tie_embeddings: bool = Field(description="Input embedding and output layer share weights.")
    max_position_embeddings: int | None = Field(
        default=None, description="Longest context the checkpoint supports."
    )
    mtp_num_layers: int = Field(
        default=0, ge=0, description="Multi-token-prediction layers (DeepSeek-V3: 1)."
    )
    mtp_layer_like: int | None = Field(
        default=None,
        ge=0,
        description="0-based decoder layer whose shape the MTP transformer layer has; None: the last one, as "
        "Megatron builds it (DeepSeek-V3). Step-3.5 and MiMo-V2-Flash get a dense MTP layer from Bridge.",
    )
    add_bias_linear: bool = Field(default=False, description="Linear layers carry biases (gpt-oss).")
    gated_linear_unit: bool = Field(default=True, description="SwiGLU-style MLPs (fc1 is 2 x ffn wide).")
    normalization: Normalization = Field(
        default="RMSNorm", description="Norm type: RMSNorm (weight only) or LayerNorm (weight and bias)."
    )
    position_embedding_type: PositionEmbedding = Field(
        default="rope",
        description="rope, or learned_absolute (a max_position_embeddings x hidden table on the first stage).",
    )
    final_logit_softcapping: float | None = Field(
        default=None,
        gt=0,
        description="cap x tanh(logits / cap) on the output layer (Gemma-4: 30); autograd keeps the tanh output, "
        "one more logits-sized BF16 tensor per loss head.",
    )
    hidden_dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Dropout after attention and MLP (Megatron keeps a 1-byte mask per element when > 0). "
        "0 for the catalog models (Bridge's Hugging Face conversions); Megatron-LM's own default is 0.1.",
    )

    # Attention
    attention: AttentionKind = Field(description="gqa (incl. MHA) or mla (multi-latent attention).")
    num_attention_heads: int = Field(gt=0, description="Query heads.")
    num_query_groups: int = Field(gt=0, description="Key/value heads (= heads for MHA and MLA).")
    head_dim: int = Field(
        gt=0, description="Per-head dim of Q/K/V for GQA (kv_channels); qk nope dim for MLA."
    )
    q_lora_rank: int | None = Field(
        default=None, description="MLA query down-projection rank (None: no q LoRA)."
    )
    kv_lora_rank: int | None = Field(default=None, description="MLA key/value down-projection rank.")
    qk_pos_emb_head_dim: int | None = Field(default=None, description="MLA decoupled RoPE dim per head.")
    v_head_dim: int | None = Field(
        default=None, description="Value head dim: MLA's, or a GQA model's where V is narrower than Q and K."
    )
    qk_layernorm: bool = Field(default=False, description="RMSNorm on Q and K (Qwen3).")
    attention_output_gate: bool = Field(
        default=False, description="Sigmoid gate on attention output (Qwen3-Next)."
    )
    softmax_sinks: bool = Field(
        default=False, description="Learned attention sinks (gpt-oss): TE CP needs a2a."
    )
    sliding_window: int | None = Field(default=None, description="Window of the sliding-window layers.")
    attention_shapes: dict[Literal["full", "sliding"], AttentionShape] = Field(
        default_factory=dict,
        description="Per softmax-attention layer type, a head geometry that differs from the trunk fields "
        "(num_attention_heads, num_query_groups, head_dim, softmax_sinks): Gemma-4's full layers (512-wide "
        "heads, 2 KV heads, k = v), Step-3.5's sliding layers (96 heads), MiMo-V2-Flash's sliding layers "
        "(8 KV heads and sinks). GQA only.",
    )
    attention_output_gate_head_wise: bool = Field(
        default=False,
        description="The checkpoint's output gate has one value per head (Step-3.5 g_proj, h x heads); "
        "Megatron Core 0.19.2 has no head-wise gate, so Bridge builds the full-width gate and the extra "
        "weights count in memory, not in the published total.",
    )
    attention_layer_types: tuple[AttentionLayerType, ...] = Field(
        description="Per decoder layer: full attention, sliding-window attention, linear (Gated DeltaNet), "
        "dsa (MLA with a DSA indexer), mamba (a Mamba-2 mixer layer of a hybrid) or none (an MLP-only hybrid layer)."
    )
    add_qkv_bias: bool = Field(
        default=False,
        description="Biases on the Q, K and V projections only (GLM-4.5 attention_bias, Qwen2-MoE qkv_bias; "
        "Megatron add_qkv_bias); add_bias_linear covers every linear layer.",
    )
    qk_layernorm_full_dim: bool = Field(
        default=False,
        description="The Q and K norms span all heads (width heads x head_dim and kv_heads x head_dim) "
        "instead of one head (OLMoE, MiniMax-M2 in Bridge's custom layer specs); only with qk_layernorm.",
    )
    # Gated DeltaNet (Qwen3-Next linear attention)
    linear_num_key_heads: int | None = Field(default=None, description="Gated DeltaNet key heads.")
    linear_num_value_heads: int | None = Field(default=None, description="Gated DeltaNet value heads.")
    linear_key_head_dim: int | None = Field(default=None, description="Gated DeltaNet key head dim.")
    linear_value_head_dim: int | None = Field(default=None, description="Gated DeltaNet value head dim.")
    linear_conv_kernel_dim: int | None = Field(default=None, description="Gated DeltaNet causal conv width.")

    # MLP / MoE
    ffn_hidden_size: int = Field(gt=0, description="FFN width of the dense layers.")
    num_dense_layers: int = Field(default=0, ge=0, description="Leading dense (non-MoE) layers.")
    num_experts: int = Field(ge=0, description="Routed experts per MoE layer; 0 only for a dense gpt spec.")
    moe_router_topk: int = Field(default=0, ge=0, description="Experts each token is routed to (0 if dense).")
    moe_ffn_hidden_size: int = Field(
        default=0, ge=0, description="FFN width of one routed expert (0 if dense)."
    )
    moe_shared_expert_intermediate_size: int | None = Field(
        default=None, description="Total FFN width of the shared expert(s); None if there are none."
    )
    moe_shared_expert_gate: bool = Field(default=False, description="Sigmoid gate on the shared expert.")
    moe_router_score_function: Literal["softmax", "sigmoid"] = Field(default="softmax")
    moe_router_num_groups: int | None = Field(default=None, description="Group-limited routing groups.")
    moe_router_group_topk: int | None = Field(default=None, description="Groups each token may use.")

    published_total_params: float | None = Field(default=None, description="Published total parameters.")
    published_active_params: float | None = Field(default=None, description="Published active parameters.")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each field came from.")

    # ---- Hybrid and sparse-attention layer kinds (issue 16): Mamba-2 hybrids (nemotron_h) and DeepSeek sparse
    # attention (glm_moe_dsa, deepseek_v32). All None/defaults for the other families.
    hybrid_layer_pattern: str | None = Field(
        default=None,
        description="Megatron hybrid_layer_pattern of the main stack, one symbol per layer (M Mamba, * attention, "
        "- MLP, E MoE); when set, each layer is either a mixer or an MLP, never both.",
    )
    mamba_num_heads: int | None = Field(default=None, gt=0, description="Mamba-2 heads (nheads).")
    mamba_head_dim: int | None = Field(default=None, gt=0, description="Mamba-2 head dim (d_inner / nheads).")
    mamba_state_dim: int | None = Field(default=None, gt=0, description="Mamba-2 SSM state size (d_state).")
    mamba_num_groups: int | None = Field(default=None, gt=0, description="Mamba-2 B/C groups (ngroups).")
    mamba_conv_kernel: int = Field(default=4, gt=0, description="Mamba-2 causal conv width (d_conv).")
    mamba_chunk_size: int = Field(default=128, gt=0, description="Mamba-2 SSD scan chunk size.")
    mlp_squared_relu: bool = Field(
        default=False, description="MLPs use squared ReLU (Nemotron-H), not SwiGLU."
    )
    mtp_block_pattern: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Hybrid symbols of one MTP block (Nemotron-H mtp_hybrid_override_pattern, e.g. '*E': an "
        "attention layer then an MoE layer), each counted like the first decoder layer with that symbol; None: "
        "one layer like mtp_layer_like.",
    )
    mtp_use_repeated_layer: bool = Field(
        default=False,
        description="One MTP block's weights are applied mtp_num_layers times (Megatron Core "
        "mtp_use_repeated_layer; Bridge's nemotron_h default when the checkpoint has MTP).",
    )
    moe_latent_size: int | None = Field(
        default=None,
        gt=0,
        description="LatentMoE width (Nemotron-3 Super/Ultra): routed experts read and write tokens of this width, "
        "projected from and back to hidden by two TP-replicated linears; the dispatcher moves latent tokens.",
    )
    dsa_index_n_heads: int | None = Field(default=None, gt=0, description="DSA lightning-indexer heads.")
    dsa_index_head_dim: int | None = Field(default=None, gt=0, description="DSA indexer head dim.")
    dsa_index_topk: int | None = Field(default=None, gt=0, description="Keys each query attends to (top-k).")
    dsa_index_topk_freq: int = Field(
        default=1, ge=1, description="Every how many layers the indexer computes its own top-k (IndexShare)."
    )
    dsa_index_skip_topk_offset: int = Field(
        default=0,
        ge=0,
        description="Leading layers before top-k sharing starts (dsa_indexer_skip_topk_offset).",
    )

    @model_validator(mode="after")
    def _moe_fields_agree(self) -> ModelSpec:
        if self.num_experts == 0:
            if self.family != "gpt":
                raise ValueError(
                    f"num_experts=0 (dense) is only allowed for family 'gpt', not {self.family!r}"
                )
            return self
        if self.num_experts < 2:
            raise ValueError("num_experts must be 0 (dense) or at least 2")
        if not 0 < self.moe_router_topk <= self.num_experts:
            raise ValueError(f"moe_router_topk must be between 1 and num_experts={self.num_experts}")
        if self.moe_ffn_hidden_size <= 0:
            raise ValueError("moe_ffn_hidden_size must be positive for an MoE model")
        return self

    @model_validator(mode="after")
    def _hybrid_fields_agree(self) -> ModelSpec:
        if len(self.attention_layer_types) != self.num_layers:
            raise ValueError(
                f"attention_layer_types has {len(self.attention_layer_types)} entries for {self.num_layers} layers"
            )
        if self.hybrid_layer_pattern is not None:
            if len(self.hybrid_layer_pattern) != self.num_layers:
                raise ValueError(
                    f"hybrid_layer_pattern has {len(self.hybrid_layer_pattern)} symbols for {self.num_layers} layers"
                )
            if self.has_mamba and not (
                self.mamba_num_heads
                and self.mamba_head_dim
                and self.mamba_state_dim
                and self.mamba_num_groups
            ):
                raise ValueError(
                    "a hybrid with Mamba layers needs mamba_num_heads, head_dim, state_dim, groups"
                )
        if self.mtp_block_pattern is not None:
            if not self.hybrid_layer_pattern:
                raise ValueError(
                    "mtp_block_pattern describes a hybrid MTP block: it needs hybrid_layer_pattern"
                )
            missing = sorted(set(self.mtp_block_pattern) - set(self.hybrid_layer_pattern))
            if missing:
                raise ValueError(
                    f"mtp_block_pattern symbols {''.join(missing)!r} do not occur in hybrid_layer_pattern"
                )
        if self.moe_latent_size is not None and not self.is_moe:
            raise ValueError("moe_latent_size needs routed experts (num_experts > 0)")
        if self.has_dsa and not (self.dsa_index_n_heads and self.dsa_index_head_dim and self.dsa_index_topk):
            raise ValueError("DSA layers need dsa_index_n_heads, dsa_index_head_dim and dsa_index_topk")
        return self

    @model_validator(mode="after")
    def _attention_shapes_agree(self) -> ModelSpec:
        shapes = [("", self.num_attention_heads, self.num_query_groups)] + [
            (f"attention_shapes.{k}.", a.num_attention_heads, a.num_query_groups)
            for k, a in self.attention_shapes.items()
        ]
        for where, heads, groups in shapes if not self.is_mla else []:
            if heads % groups:  # TE DotProductAttention asserts heads divide over the GQA groups
                raise ValueError(
                    f"{where}num_attention_heads={heads} is not a multiple of {where}num_query_groups="
                    f"{groups} (key/value heads): each KV head serves a whole group of query heads"
                )
        if self.attention_shapes and self.is_mla:
            raise ValueError("attention_shapes describe GQA layers; an MLA model has one attention shape")
        for kind in self.attention_shapes:
            if kind not in self.attention_layer_types:
                raise ValueError(f"attention_shapes names {kind!r} layers, which attention_layer_types lacks")
        if self.attention_output_gate_head_wise and not self.attention_output_gate:
            raise ValueError("attention_output_gate_head_wise needs attention_output_gate")
        if self.mtp_layer_like is not None and self.mtp_layer_like >= self.num_layers:
            raise ValueError(
                f"mtp_layer_like={self.mtp_layer_like} must name one of the {self.num_layers} layers"
            )
        return self

    @cached_property
    def _shapes_by_type(self) -> dict[str, AttentionShape]:
        trunk = AttentionShape.model_construct(
            num_attention_heads=self.num_attention_heads,
            num_query_groups=self.num_query_groups,
            head_dim=self.head_dim,
            v_head_dim=self.v_head_dim,
            softmax_sinks=self.softmax_sinks,
            k_eq_v=False,
        )
        return {kind: self.attention_shapes.get(kind, trunk) for kind in ("full", "sliding", "dsa")}  # type: ignore[call-overload]

    def attention_shape(self, layer_type: str = "full") -> AttentionShape:
        """The head geometry of a softmax-attention layer of ``layer_type`` (full, sliding or dsa)."""
        return self._shapes_by_type.get(layer_type) or self._shapes_by_type["full"]

    @cached_property
    def shapes_of_layer_types(self) -> dict[str, AttentionShape]:
        """The head geometry of each softmax-attention layer type the model has (full alone when it has none)."""
        kinds = [t for t in ("full", "sliding", "dsa") if t in self.attention_layer_types] or ["full"]
        return {kind: self.attention_shape(kind) for kind in kinds}

    @cached_property
    def softmax_attention_shapes(self) -> tuple[AttentionShape, ...]:
        """Every distinct head geometry among the softmax-attention layers (one for most models)."""
        return tuple(dict.fromkeys(self.shapes_of_layer_types.values()))

    def tp_splits_attention(self, tp: int) -> bool:
        """TP divides every layer shape's query heads, and each shape's KV heads divide TP or are a multiple of
        it (Megatron replicates KV heads when TP exceeds them)."""
        return all(
            s.num_attention_heads % tp == 0 and (s.num_query_groups % tp == 0 or tp % s.num_query_groups == 0)
            for s in self.softmax_attention_shapes
        )

    @property
    def has_softmax_sinks(self) -> bool:
        """Some softmax-attention layer has learned sinks (gpt-oss: all; MiMo-V2-Flash: the sliding ones)."""
        return any(s.softmax_sinks for s in self.softmax_attention_shapes)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_token_width(self) -> int:
        """Width of the tokens the dispatcher moves and the routed experts read and write: the LatentMoE width, or
        hidden (Megatron Core moe_layer.py fc1_latent_proj runs before the dispatch)."""
        return self.moe_latent_size or self.hidden_size

    @property
    def mtp_layer_index(self) -> int:
        """The decoder layer an MTP layer is counted like (parameters, activations, FLOPs)."""
        return self.num_layers - 1 if self.mtp_layer_like is None else self.mtp_layer_like

    @cached_property
    def mtp_block_layers(self) -> tuple[int, ...]:
        """Decoder layers one MTP block's inner layers are counted like (parameters, activations, FLOPs): the first
        layer of each symbol of ``mtp_block_pattern``, or ``mtp_layer_index`` for a one-layer MTP block."""
        if self.mtp_block_pattern and self.hybrid_layer_pattern:
            return tuple(self.hybrid_layer_pattern.index(symbol) for symbol in self.mtp_block_pattern)
        return (self.mtp_layer_index,)

    def mtp_weight_blocks(self, depths: int) -> int:
        """MTP blocks whose weights exist for ``depths`` MTP depths: one shared block when the layer is repeated."""
        return min(depths, 1) if self.mtp_use_repeated_layer else depths

    @cached_property
    def moe_layers(self) -> tuple[bool, ...]:
        """Per decoder layer: True when the layer's MLP is an MoE layer."""
        if self.hybrid_layer_pattern:
            return tuple(symbol == "E" for symbol in self.hybrid_layer_pattern)
        return tuple(self.is_moe and i >= self.num_dense_layers for i in range(self.num_layers))

    @property
    def is_hybrid(self) -> bool:
        """A Megatron hybrid stack: every layer is one mixer (Mamba, attention) or one MLP."""
        return bool(self.hybrid_layer_pattern)

    def layer_has_mlp(self, layer_type: str) -> bool:
        """Whether a layer of this attention type carries an MLP: always, except in a hybrid stack, where only
        the MLP-only layers (type none) do."""
        return not self.is_hybrid or layer_type == "none"

    @property
    def has_mamba(self) -> bool:
        return "mamba" in self.attention_layer_types

    @property
    def has_dsa(self) -> bool:
        return "dsa" in self.attention_layer_types

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def all_layers_moe(self) -> bool:
        """Every MLP is an MoE layer (no dense MLP); a hybrid's Mamba and attention layers have no MLP."""
        with_mlp = sum(self.layer_has_mlp(t) for t in self.attention_layer_types)
        return self.num_moe_layers == with_mlp

    @property
    def norm_params_per_width(self) -> int:
        """Parameters a norm of width w holds per element: 1 (RMSNorm weight) or 2 (LayerNorm weight, bias)."""
        return 2 if self.normalization == "LayerNorm" else 1

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def has_linear_attention(self) -> bool:
        return "linear" in self.attention_layer_types

    @property
    def has_sliding_window(self) -> bool:
        return "sliding" in self.attention_layer_types

    @property
    def moe_layer_freq(self) -> list[int]:
        """Megatron's ``moe_layer_freq`` list (1 = MoE layer, 0 = dense)."""
        return [int(m) for m in self.moe_layers]


FlexBackend = Literal["deepep", "hybridep", "ncclep"]
QuantRecipe = Literal["fp8-delayed", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4"]


class GpuSpec(BaseModel):
    """One GPU type and the system it usually comes in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Catalog id, e.g. h100.")
    name: str = Field(description="Marketing name.")
    device_name: str = Field(description="What torch.cuda.get_device_properties().name reports.")
    compute_capability: tuple[int, int] = Field(description="SM version (major, minor).")
    hbm_gb: float = Field(gt=0, description="Physical HBM in GB (10^9 bytes).")
    usable_hbm_gib: float = Field(gt=0, description="Memory PyTorch can allocate, GiB (2^30 bytes).")
    hbm_bandwidth_tbps: float = Field(gt=0, description="HBM bandwidth, TB/s.")
    bf16_tflops: float = Field(gt=0, description="Dense BF16 tensor-core peak, TFLOP/s.")
    fp8_tflops: float = Field(gt=0, description="Dense FP8 tensor-core peak, TFLOP/s.")
    fp4_tflops: float | None = Field(default=None, description="Dense FP4 peak, TFLOP/s (None: no FP4).")
    nvlink_gbps: float = Field(gt=0, description="NVLink bandwidth per GPU per direction, GB/s.")
    nvlink_domain: int = Field(gt=0, description="GPUs reachable over NVLink (8 on HGX, 72 on NVL72).")
    gpus_per_node: int = Field(gt=0, description="GPUs per host (4 per GB200/GB300 compute tray).")
    network_gbps: float = Field(gt=0, description="Scale-out network bandwidth per GPU per direction, GB/s.")
    quant_recipes: tuple[QuantRecipe, ...] = Field(
        description="FP8/FP4 recipes Transformer Engine 2.14 allows."
    )
    flex_backends: tuple[FlexBackend, ...] = Field(description="Flex dispatcher backends Bridge 0.6 allows.")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each field came from.")

    @property
    def is_nvl72(self) -> bool:
        return self.nvlink_domain >= 72
