"""Analytic step-time model: how fast a layout trains, term by term, with its assumptions written down.

Model FLOPs follow Megatron-LM's ``num_floating_point_operations`` (core_r0.19.0 training.py): 3 x 2 x
tokens x (active linear weights) + the causal core-attention term, logits and MTP included, with sliding-window
layers over their window as Megatron Bridge's copy of it counts them (the runs it measures report); MFU and
"model TFLOP/s per GPU" use them with Megatron Bridge's denominators (dense FP8 peak where the GPU has
one). Time is what the busiest pipeline stage spends per microbatch - GEMMs at an achieved fraction of
peak, flash attention, memory-bound work, exposed TP/CP/EP communication over NVLink or the network -
times the 1F1B schedule ``(m + (PP - 1) / VPP)``, plus the data-parallel gradient sync that is not
overlapped and the optimizer step. Constants are stated in ``ASSUMPTIONS`` with their rationale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..model.params import attention_params, layer_params, mlp_params, spec_cache
from ..model.specs import GpuSpec, ModelSpec
from .context import Context
from .pipeline import PipelineSplit
from .step_time_ep import ep_traffic
from .step_time_hybrid import (
    dsa_gathered_width,
    hybrid_core_flops_per_token,
    latent_projection_flops_per_token,
    mamba_cp_exchange_bytes,
    megatron_hybrid_flops_per_token,
)
from .step_time_layers import (
    MLP_ELEMENTWISE_BYTES,
    bf16_edge_layers,
    gemm_passes,
    lora_params_per_rank,
    lora_traffic_bytes,
    mlp_elementwise_bytes,
)
from .sustained_rate import fp4_over_fp8, sustained_fraction

# Achieved fractions of dense peak, and link efficiencies. Rationale in ASSUMPTIONS.
GEMM_EFFICIENCY = {"bf16": 0.62, "fp8": 0.50, "fp4": 0.40}
GROUPED_GEMM_EFFICIENCY = 0.75  # relative to GEMM_EFFICIENCY for the expert grouped GEMMs
ATTENTION_EFFICIENCY = 0.40  # fused attention fwd+bwd, of the BF16 peak (long-context DSV3 H100 MFU)
# Mamba-2's chunked SSD scan (fwd + bwd Triton kernels), of the BF16 peak: fitted to Nemotron-3 Nano's measured
# runs on five GPU types (median estimate / measured 1.01 over its 21 rows), checked on Nemotron-3 Super and 3.5
# Lightning on H100.
MAMBA_SCAN_EFFICIENCY = 0.01
NVLINK_EFFICIENCY = 0.70
NETWORK_EFFICIENCY = 0.75
A2A_EFFICIENCY = {"alltoall": 0.45, "allgather": 0.35, "flex-deepep": 0.70, "flex-hybridep": 0.75,
                  "flex-ncclep": 0.65}  # fmt: skip
ELEMENTWISE_BYTES_PER_TOKEN_H = 48  # bytes moved through HBM per token per layer, per unit of hidden size
TP_OVERLAP = 0.5  # share of TP collectives hidden behind GEMMs
CP_OVERLAP = 0.8  # share of the p2p KV exchange hidden behind attention (ring), a2a is not hidden
EP_OVERLAP = 0.5  # share of the expert all-to-all hidden with --overlap-moe-expert-parallel-comm
DP_EXPOSED = 0.2  # share of the gradient reduce-scatter / parameter all-gather not overlapped
CPU_ADAM_BYTES_PER_S = 20e9  # host-side Adam throughput on offloaded state (bytes of state per second)

COMM_FORWARD_SHARE = {"tp_comm": 0.5, "cp_comm": 1 / 3, "ep_comm": 0.5}  # forward share of each comm term

ASSUMPTIONS = [
    "Model FLOPs: Megatron-LM num_floating_point_operations (3 x fwd, FMA = 2, causal core attention halved), "
    "logits and MTP layers included, sliding-window layers over their mean causal window as Megatron Bridge "
    "counts them; recompute adds hardware FLOPs but not model FLOPs.",
    f"GEMMs reach {GEMM_EFFICIENCY['bf16']:.0%} of the BF16 peak, {GEMM_EFFICIENCY['fp8']:.0%} of the FP8 peak "
    f"(casts and amax included); expert grouped GEMMs {GROUPED_GEMM_EFFICIENCY:.0%} of that (small per-expert "
    "shapes). NVFP4 GEMMs, with their quantization, run at the multiple of the FP8 rate that measured NVFP4 / MXFP8 "
    "pairs give (engine/fp4_rate.yaml; nominal FP4 peaks are 2-3x FP8), or at "
    f"{GEMM_EFFICIENCY['fp4']:.0%} of the FP4 peak without pairs.",
    f"Flash attention (fwd + bwd) runs in BF16 at {ATTENTION_EFFICIENCY:.0%} of the BF16 peak; Mamba-2's SSD scan "
    f"at {MAMBA_SCAN_EFFICIENCY:.0%} (fitted to Nemotron-3 Nano's measured runs on five GPU types); sliding-window "
    "layers attend to at most the window; Gated DeltaNet layers cost their projections plus 4 n_v d_v^2 per token.",
    "GEMM rates are scaled by the share of its nominal peaks the GPU sustains, measured against its Blackwell "
    "Ultra sibling (engine/sustained_rate.yaml: B200 and GB200 train 1.1-1.2x slower than B300 and GB300 at the "
    "same settings and the same peaks on paper); attention and the scan keep theirs (no pair measures them), and "
    "MFU keeps the nominal peak.",
    f"Memory-bound work: norms, residuals and the rest of a layer's token-wide elementwise work move "
    f"{ELEMENTWISE_BYTES_PER_TOKEN_H} x hidden bytes per token per layer through HBM (fwd + bwd); an MLP's "
    f"activation moves {MLP_ELEMENTWISE_BYTES['fc1_out']} bytes per fc1 output and "
    f"{MLP_ELEMENTWISE_BYTES['act_out']} per activation element, per token for dense and shared MLPs and per "
    f"routed copy (top-k per token) for experts, whose permute and unpermute add "
    f"{MLP_ELEMENTWISE_BYTES['routed_token']} bytes per element of the routed token (latent width under "
    "LatentMoE).",
    "Layers Megatron Core keeps in BF16 under FP8/FP4 (first_last_layers_bf16 with num_layers_at_start/end_in_bf16, "
    "fp8_utils.py:673-689, fp4_utils.py:247-263: decoder layer numbers, MTP layers excluded) run their GEMMs at "
    "the BF16 rate.",
    f"NVLink collectives reach {NVLINK_EFFICIENCY:.0%} and the scale-out network {NETWORK_EFFICIENCY:.0%} of the "
    "per-GPU link bandwidth of the catalog; a group wider than the NVLink domain runs at the network rate, and "
    "one within it is taken to sit in one domain (on NVL72, ranks placed so a group of up to 72 stays in a rack: "
    "64 a rack for power-of-two groups).",
    "TP with sequence parallelism: all-gather + reduce-scatter of [tokens, hidden] around attention and the "
    f"dense/shared MLP, fwd and bwd; {TP_OVERLAP:.0%} hidden behind GEMMs.",
    "CP p2p (ring): K and V of every other shard stream past each rank (fwd, and K, V, dK, dV in bwd), "
    f"{CP_OVERLAP:.0%} of it hidden behind attention; a2a exchanges Q, K, V and O by head before and after "
    "attention, not hidden; a2a+p2p does a2a inside its first level and the ring over the second.",
    "The output layer (logits) runs in BF16 also when the transformer layers run FP8/FP4.",
    "EP: dispatch and combine of tokens x top-k x hidden (FP8 dispatch with quantized precision, BF16 combine), "
    "fwd and bwd; with alltoall the copies on other nodes cross the network, while DeepEP and HybridEP send a token "
    "once per remote node it needs (expected count for balanced routing) and forward it over NVLink; dispatcher efficiency "
    + ", ".join(f"{k} {v:.0%}" for k, v in A2A_EFFICIENCY.items())
    + f"; with ep_overlap {EP_OVERLAP:.0%} hidden.",
    "Pipeline: step = (microbatches + (PP - 1) / VPP) x the busiest stage's microbatch time (interleaved 1F1B); "
    "P2P activation transfers are hidden.",
    f"Data parallel: gradient reduce-scatter and parameter all-gather over DP x CP (dense) and EDP (experts), "
    f"{DP_EXPOSED:.0%} exposed. Optimizer step reads and writes its state once at HBM speed; offloaded state is "
    f"updated on the host at {CPU_ADAM_BYTES_PER_S / 1e9:.0f} GB/s of state.",
    "Token routing is balanced (Megatron Bridge's published numbers force-balance the experts).",
    "Recompute replays in backward the forward work of what each Megatron Core 0.19 label checkpoints: "
    "mla_up_proj the Q and KV up-projection GEMMs (and RoPE); mlp the dense MLP of dense layers; "
    "shared_experts the shared-expert MLP; moe the router, the expert and shared GEMMs and the forward "
    "dispatch and combine; layernorm and moe_act an elementwise pass over their inputs at HBM speed; "
    "core_attn the attention forward and its CP exchange. No selective label other than core_attn replays "
    "core attention. Full recompute replays a layer's whole forward (1/3 of GEMM, attention and memory-bound "
    "time, the forward share of TP, CP and EP communication) for the layers it checkpoints.",
    "Stated error: the spread measured against the calibration corpus (engine/stated_error.yaml, README "
    "Calibration), per model family where the corpus has enough of its rows. Per-kernel launch and framework "
    "overheads are not modelled: at 4K on 8 GPUs (Bridge's Moonlight recompute study) they dominate and the "
    "absolute estimate is several times too fast.",
]


@dataclass(frozen=True)
class Recompute:
    """The recompute setting the step time charges: granularity, selective labels, and for full recompute the
    share of a rank's layers it checkpoints."""

    granularity: str | None = None
    modules: frozenset[str] = frozenset()
    full_share: float = 1.0

    @classmethod
    def selective(cls, labels) -> Recompute:
        return cls("selective", frozenset(labels)) if labels else cls()

    @classmethod
    def of(cls, ctx: Context) -> Recompute:
        c = ctx.cfg
        if c.recompute_granularity == "selective":
            return cls.selective(ctx.recompute_modules)
        if c.recompute_granularity == "full":
            share = 1.0
            split = ctx.split.split
            if c.recompute_method == "block" and c.recompute_num_layers and split is not None:
                chunk = max(s.decoders for row in split.stages for s in row) or 1
                share = min(1.0, c.recompute_num_layers / chunk)
            return cls("full", frozenset(), share)
        return cls()


def mla_up_weights(m: ModelSpec) -> int:
    """Weights of the Q and KV up-projections mla_up_proj replays (linear_q_proj when there is no Q LoRA)."""
    n = m.num_attention_heads
    q_in = m.q_lora_rank or m.hidden_size
    return q_in * n * (m.head_dim + (m.qk_pos_emb_head_dim or 0)) + (m.kv_lora_rank or 0) * n * (
        m.head_dim + (m.v_head_dim or 0)
    )


def offloaded_state(ctx: Context) -> float:
    """Bytes of optimizer state (FP32 master and two moments) per GPU the host updates under CPU offload."""
    fraction = ctx.cfg.optimizer_cpu_offload_fraction
    if not fraction:
        return 0.0
    split = ctx.split.split
    per_rank = (
        max(split.decoders_per_rank) if split is not None else ctx.model.num_layers // max(1, ctx.cfg.pp)
    )
    dense, expert = _params_per_rank(ctx, list(range(per_rank)))
    shard = max(1, (ctx.layout.dp or 1) * ctx.cfg.cp)
    return 12 * fraction * (dense / shard + expert / max(1, ctx.layout.edp or 1))


@dataclass
class StepTime:
    """Seconds per training step, by term, and the resulting throughput."""

    terms: dict[str, float] = field(default_factory=dict)  # per step on the busiest stage, seconds
    recompute_by_label: dict[str, float] = field(default_factory=dict)  # the recompute term, per label
    step_s: float = 0.0
    model_flops_per_step: float = 0.0
    tokens_per_step: int = 0
    tflops_per_gpu: float = 0.0
    mfu: float = 0.0
    mfu_denominator_tflops: float = 0.0
    bubble_fraction: float = 0.0
    balanced_s: float = (
        0.0  # the pipeline time with no bubble and perfectly even stages: a floor for any split
    )
    # Per PP stage, one microbatch: seconds by term ("recompute:<label>" for each label's replay). The busiest
    # stage's sum times pipeline_factor is the pipeline time; the planner bounds other recompute settings with it.
    stage_terms: tuple[dict[str, float], ...] = ()
    # Per layer kind (attention type, MoE?), one layer and one microbatch: seconds by term (read only).
    layer_terms: dict[tuple[str, bool], dict[str, float]] = field(default_factory=dict)
    pipeline_factor: float = 0.0  # microbatches + (PP - 1) / VPP


# --------------------------------------------------------------------------- FLOPs


def _window_keys(window: int, seq: int) -> float:
    """Twice the mean causal context of a query in a sliding-window layer (the core-attention formula halves its
    keys): W - W (W - 1) / 2T when the window W is shorter than the sequence T, else T / 2, as Megatron Bridge
    0.6.2 counts it (training/utils/flop_utils.py:1031-1043; Megatron-LM 0.19.2's training.py has no window term)."""
    return 2 * window - window * (window - 1) / seq if window < seq else seq


def _core_attention_flops_per_token(spec: ModelSpec, layer_type: str, seq: int) -> float:
    """Forward FLOPs of QK^T and AV per token for one layer, causal (Megatron's halving); a sliding-window layer
    (with its own head shape) over its window."""
    hybrid = hybrid_core_flops_per_token(spec, layer_type, seq)  # Mamba, DSA and MLP-only layers
    if hybrid is not None:
        return hybrid
    n = spec.num_attention_heads
    if layer_type == "linear":
        nv, dv = spec.linear_num_value_heads or 0, spec.linear_value_head_dim or 0
        return 2 * nv * dv * dv * 4
    if spec.is_mla:
        width = n * (spec.head_dim + (spec.qk_pos_emb_head_dim or 0)) / 2 + n * (spec.v_head_dim or 0) / 2
    else:
        shape = spec.attention_shape(layer_type)
        width = (
            shape.num_attention_heads * (shape.head_dim + shape.value_dim) / 2
        )  # (QK^T + AV) x causal half
    windowed = layer_type == "sliding" and spec.sliding_window
    keys = _window_keys(spec.sliding_window, seq) if windowed else seq
    return 2 * width * keys


def layer_flops_per_token(spec: ModelSpec, index: int, seq: int) -> float:
    """Forward FLOPs per token of decoder layer ``index`` (linear layers and core attention)."""
    layer_type = spec.attention_layer_types[index]
    attn, _ = attention_params(spec, layer_type)
    shared, _, active, _ = mlp_params(spec, spec.moe_layers[index], layer_type)
    router = spec.hidden_size * spec.num_experts if spec.moe_layers[index] else 0
    core = _core_attention_flops_per_token(spec, layer_type, seq)
    latent = latent_projection_flops_per_token(spec) if spec.moe_layers[index] else 0.0
    return 2 * (attn + shared + active + router) + core + latent


def model_flops_per_token(spec: ModelSpec, seq: int, mtp_layers: int) -> float:
    """Megatron's model FLOPs per token (fwd + bwd), including logits and MTP."""
    cache = spec_cache(spec)
    key = ("model_flops_per_token", seq, mtp_layers)
    if key not in cache:
        cache[key] = _model_flops_per_token(spec, seq, mtp_layers)
    return cache[key]


def _model_flops_per_token(spec: ModelSpec, seq: int, mtp_layers: int) -> float:
    if spec.is_hybrid:  # Megatron counts a hybrid stack by layer symbol (training.py hybrid_flops)
        return megatron_hybrid_flops_per_token(spec, seq, mtp_layers)
    h = spec.hidden_size
    kinds: dict[tuple[str, bool], int] = {}
    first: dict[tuple[str, bool], int] = {}
    for i in range(spec.num_layers):
        key = (spec.attention_layer_types[i], spec.moe_layers[i])
        kinds[key] = kinds.get(key, 0) + 1
        first.setdefault(key, i)
    fwd = sum(n * layer_flops_per_token(spec, first[key], seq) for key, n in kinds.items())
    block = sum(layer_flops_per_token(spec, i, seq) for i in spec.mtp_block_layers)
    fwd += mtp_layers * (block + 2 * (2 * h * h))
    fwd += 2 * h * spec.vocab_size * (1 + mtp_layers)
    return 3 * fwd


# --------------------------------------------------------------------------- time


def _gemm_rate(gpu: GpuSpec, precision: str) -> float:
    """Achieved FLOP/s of dense GEMMs in this precision: the GEMM efficiency of the nominal dense peak, at the
    share of its peaks the GPU sustains (sustained_rate.py)."""
    if precision == "nvfp4" and gpu.fp4_tflops:
        measured = fp4_over_fp8()
        if measured is not None:
            return _gemm_rate(gpu, "mxfp8") * measured
        peak, kind = gpu.fp4_tflops, "fp4"
    elif precision != "bf16":
        peak, kind = gpu.fp8_tflops, "fp8"
    else:
        peak, kind = gpu.bf16_tflops, "bf16"
    return peak * 1e12 * GEMM_EFFICIENCY[kind] * sustained_fraction(gpu.id)


def _group_bandwidth(gpu: GpuSpec, group: int, stride: int = 1) -> float:
    """Bytes/s per GPU for a collective over ``group`` ranks placed ``stride`` apart."""
    if group <= 1:
        return float("inf")
    span = group * stride
    if span <= gpu.nvlink_domain:
        return gpu.nvlink_gbps * 1e9 * NVLINK_EFFICIENCY
    return gpu.network_gbps * 1e9 * NETWORK_EFFICIENCY


def mfu_denominator(gpu: GpuSpec) -> float:
    """Megatron Bridge's MFU denominator: the dense FP8 peak (TFLOP/s)."""
    return gpu.fp8_tflops


def step_time(
    ctx: Context, recompute: Recompute | None = None, offloaded_state_bytes: float | None = None
) -> StepTime:
    """Estimate the step time of a resolved configuration on its GPU.

    ``recompute`` and ``offloaded_state_bytes`` default to what the configuration sets; the planner passes
    others to bound a layout before its recompute and offload are chosen.
    """
    if ctx.gpu is None or ctx.cfg.seq_len is None:
        raise ValueError("step_time needs a GPU and a sequence length")
    if isinstance(recompute, int | float):
        raise TypeError("step_time takes a Recompute (or None: the configuration's own), not a fraction")
    rc = Recompute.of(ctx) if recompute is None else recompute
    if offloaded_state_bytes is None:
        offloaded_state_bytes = offloaded_state(ctx)
    c, m, gpu, lay = ctx.cfg, ctx.model, ctx.gpu, ctx.layout
    split = ctx.split.split
    seq = c.seq_len
    sp = ctx.sequence_parallel
    tokens = c.mbs * seq // c.cp  # tokens per CP rank per microbatch (shared by the TP group)
    tokens_rank = tokens // (c.tp if sp else 1)
    h = m.hidden_size
    quantized_gemm = _gemm_rate(gpu, c.precision)
    attn_rate = gpu.bf16_tflops * 1e12 * ATTENTION_EFFICIENCY
    hbm = gpu.hbm_bandwidth_tbps * 1e12
    bytes_act = 2

    layer_ranges = rank_layers(split) if split is not None else _even_ranges(m.num_layers, c.pp)

    tp_bw = _group_bandwidth(gpu, c.tp)
    ep_group = lay.ep * lay.etp
    a2a_eff = A2A_EFFICIENCY.get(c.dispatcher, 0.5)
    dispatch_bytes = 1 if c.precision != "bf16" else 2

    # Layers of a kind take the same time for the same parallel sizes and knobs, whatever the PP split: the
    # planner asks for the same kinds thousands of times, so they are kept per model.
    cache = spec_cache(m).setdefault("layer_times", {})
    knobs = (gpu.id, c.tp, c.cp, c.mbs, seq, sp, c.precision, lay.ep, lay.etp, c.dispatcher, c.ep_overlap,
             c.cp_comm_type, tuple(c.hierarchical_cp_sizes or ()), rc,
             fp4_over_fp8() if c.precision == "nvfp4" else None, c.peft, c.lora_dim, c.lora_target_modules)  # fmt: skip
    bf16_gemm = _gemm_rate(gpu, "bf16")
    edge = bf16_edge_layers(ctx)
    passes = gemm_passes(ctx)
    kinds = cache.get(knobs)
    if kinds is None:
        if len(cache) > 20_000:
            cache.clear()
        kinds = cache[knobs] = {}

    def kind_time(key: tuple) -> dict[str, float]:
        """Per-microbatch seconds of one layer of this (attention type, MoE?) kind; layers of a kind agree. A
        third element True prices the kind as a BF16 edge layer under FP8/FP4."""
        if key not in kinds:
            kinds[key] = _layer_time(*key)
        return kinds[key]

    def _layer_time(layer_type: str, is_moe: bool, in_bf16: bool = False) -> dict[str, float]:
        gemm = bf16_gemm if in_bf16 else quantized_gemm
        attn_w, _ = attention_params(m, layer_type)
        shared, _, active, _ = mlp_params(m, is_moe, layer_type)
        t: dict[str, float] = {}
        # GEMMs (fwd + 2x bwd = 3x fwd; LoRA: no wgrad of the frozen base, 2x), TP-sharded (dense), local tokens.
        dense_flops = passes * 2 * tokens * (attn_w + shared) / c.tp
        expert_flops = (
            passes * 2 * tokens_rank * (active + (h * m.num_experts if is_moe else 0)) if is_moe else 0
        )
        # with ETP = 1 each rank computes its own tokens' experts; ETP > 1 splits them further
        expert_flops = expert_flops * (c.tp if sp else 1) / (lay.etp * (c.tp if sp else 1)) if is_moe else 0
        # LatentMoE's projections: TP-replicated GEMMs on the rank's own (sequence-parallel) tokens
        latent_flops = passes * tokens_rank * latent_projection_flops_per_token(m) if is_moe else 0.0
        t["gemm"] = (dense_flops + latent_flops) / gemm + expert_flops / (gemm * GROUPED_GEMM_EFFICIENCY)
        core = _core_attention_flops_per_token(m, layer_type, seq) * tokens * 3 / c.tp
        scan_rate = gpu.bf16_tflops * 1e12 * MAMBA_SCAN_EFFICIENCY  # qualified by tools/step_mamba_split.py
        rate = {"linear": gemm, "mamba": scan_rate}.get(layer_type, attn_rate)
        t["mamba_scan" if layer_type == "mamba" else "attention"] = core / rate
        dense_mlp_bytes, routed_bytes = mlp_elementwise_bytes(m, is_moe, layer_type)
        t["memory_bound"] = (
            ELEMENTWISE_BYTES_PER_TOKEN_H * h * tokens_rank
            + dense_mlp_bytes * tokens / c.tp
            + routed_bytes * tokens_rank / lay.etp
        ) / hbm
        lora_token, lora_copy = lora_traffic_bytes(ctx, layer_type, is_moe)
        if lora_token or lora_copy:  # the adapters' skinny GEMMs, bandwidth-bound
            t["lora"] = (lora_token * tokens + lora_copy * tokens_rank * m.moe_router_topk) / hbm
        if c.tp > 1:
            volume = 4 * tokens * h * bytes_act * (c.tp - 1) / c.tp * (2 if shared or not is_moe else 1)
            t["tp_comm"] = volume / tp_bw * (1 - TP_OVERLAP)
        if c.cp > 1 and layer_type not in ("linear", "mamba", "none"):
            shape = m.attention_shape(layer_type)
            kv_width = (
                shape.num_query_groups * (shape.head_dim + shape.value_dim)
                if not m.is_mla
                else m.num_attention_heads * (m.head_dim + (m.qk_pos_emb_head_dim or 0) + (m.v_head_dim or 0))
            )
            if layer_type == "dsa":  # DSA all-gathers its MLA latent and indexer keys, not per-head K/V
                kv_width = dsa_gathered_width(m)
            kv_bytes = tokens * kv_width * bytes_act / c.tp
            qo_bytes = tokens * shape.num_attention_heads * shape.value_dim * 2 * bytes_act / c.tp
            comm = ctx.cp_comm_type
            a2a, ring = {"a2a": (c.cp, 1), "p2p": (1, c.cp), "all_gather": (1, c.cp)}.get(comm, (1, c.cp))
            if comm == "a2a+p2p":
                a2a, ring = (tuple(c.hierarchical_cp_sizes) if c.hierarchical_cp_sizes else (1, c.cp))[:2]
            cost = 0.0
            if a2a > 1:  # Ulysses: Q, K, V scattered by head and O gathered back, fwd and bwd; not hidden
                volume = 3 * (kv_bytes + qo_bytes) * (a2a - 1) / a2a
                cost += volume / _group_bandwidth(gpu, a2a, c.tp)
            if ring > 1:  # ring: K and V of every other shard stream past (dK, dV back in bwd)
                volume = 3 * kv_bytes * (ring - 1)
                seconds = volume / _group_bandwidth(gpu, ring, c.tp * a2a)
                cost += seconds - min(t["attention"], seconds) * CP_OVERLAP
            t["cp_comm"] = cost
        if c.cp > 1 and layer_type == "mamba":  # head-sharding all-to-alls around the conv and SSM
            t["cp_comm"] = mamba_cp_exchange_bytes(m, tokens, c.tp, c.cp) / _group_bandwidth(gpu, c.cp, c.tp)
        if is_moe and ep_group > 1:
            # routed tokens travel at the latent width under LatentMoE (moe_token_width), else the hidden size
            inter, intra = ep_traffic(c.dispatcher, tokens_rank, m.moe_router_topk, m.moe_token_width,
                                      m.num_experts, ep_group, gpu.nvlink_domain, dispatch_bytes + 2)  # fmt: skip
            t_a2a = max(inter / (gpu.network_gbps * 1e9), intra / (gpu.nvlink_gbps * 1e9)) / a2a_eff
            t["ep_comm"] = t_a2a * ((1 - EP_OVERLAP) if c.ep_overlap else 1.0)
        if rc.granularity:
            t.update(_replay(rc, t, layer_type, is_moe, tokens, tokens_rank, gemm))
        return t

    def _replay(rc, t, layer_type, is_moe, tokens, tokens_rank, gemm) -> dict[str, float]:
        """Forward work the recompute setting replays in backward, per label (one layer, one microbatch)."""
        fwd = {
            k: v / (passes if k == "gemm" else 3)
            for k, v in t.items()
            if k in ("gemm", "attention", "mamba_scan", "memory_bound")
        }
        fwd.update({k: t.get(k, 0.0) * share for k, share in COMM_FORWARD_SHARE.items()})
        if rc.granularity == "full":
            return {"recompute:full": sum(fwd.values()) * rc.full_share}
        out: dict[str, float] = {}
        labels = rc.modules
        if "core_attn" in labels and layer_type not in ("linear", "mamba"):  # no core attention to replay
            out["recompute:core_attn"] = fwd.get("attention", 0.0) + fwd["cp_comm"]
        if "mla_up_proj" in labels and m.is_mla:
            out["recompute:mla_up_proj"] = 2 * tokens * mla_up_weights(m) / c.tp / gemm
        shared, _, active, _ = mlp_params(m, is_moe)
        if "mlp" in labels and not is_moe:
            out["recompute:mlp"] = 2 * tokens * shared / c.tp / gemm
        if "shared_experts" in labels and is_moe and shared:
            out["recompute:shared_experts"] = 2 * tokens * shared / c.tp / gemm
        if "moe" in labels and is_moe:
            experts = 2 * tokens_rank * (active + h * m.num_experts) / lay.etp
            out["recompute:moe"] = (
                2 * tokens * shared / c.tp / gemm
                + tokens_rank * latent_projection_flops_per_token(m) / gemm
                + experts / (gemm * GROUPED_GEMM_EFFICIENCY)
                + fwd["ep_comm"]
                + ELEMENTWISE_BYTES_PER_TOKEN_H / 6 * h * tokens_rank / hbm
            )
        if "layernorm" in labels:
            norms = int(m.is_mla) + int(is_moe)  # the norms not fused into a TE GEMM
            out["recompute:layernorm"] = norms * 4 * h * tokens_rank / hbm
        if "moe_act" in labels and is_moe and "moe" not in labels:
            out["recompute:moe_act"] = 6 * m.moe_router_topk * m.moe_ffn_hidden_size * tokens_rank / hbm
        if "gdn_norm_out" in labels and layer_type == "linear":
            width = (m.linear_num_value_heads or 0) * (m.linear_value_head_dim or 0)
            out["recompute:gdn_norm_out"] = 4 * width * tokens_rank / c.tp / hbm
        return out

    stage_times = []
    stage_terms = []
    for r, layers in enumerate(layer_ranges):
        terms: dict[str, float] = {}
        for key, count in kind_counts(m, layers):
            for k, v in kind_time(key).items():
                terms[k] = terms.get(k, 0.0) + v * count
        for i in edge.intersection(layers):  # a BF16 edge layer: its BF16 time in place of the quantized one
            key = (m.attention_layer_types[i], m.moe_layers[i])
            for k, v in kind_time((*key, True)).items():
                terms[k] = terms.get(k, 0.0) + v - kind_time(key).get(k, 0.0)
        if r == c.pp - 1:
            logits = passes * 2 * tokens * h * m.vocab_size * (1 + ctx.mtp_layers) / c.tp
            terms["logits"] = logits / bf16_gemm  # the output layer stays in BF16
            for i in m.mtp_block_layers:  # each MTP depth runs the block's layers once
                for k, v in kind_time((m.attention_layer_types[i], m.moe_layers[i])).items():
                    terms[k] = terms.get(k, 0.0) + v * ctx.mtp_layers
        stage_terms.append(terms)
        stage_times.append(sum(terms.values()))
    busiest = max(range(c.pp), key=lambda r: stage_times[r])
    t_mb = stage_times[busiest]
    microbatches = ctx.num_microbatches or 1
    vpp = ctx.vpp or 1
    bubble = (c.pp - 1) / vpp if c.pp > 1 else 0.0
    pipeline_s = t_mb * (microbatches + bubble)

    dp_s, optimizer_s = sync_seconds(ctx, layer_ranges[busiest], offloaded_state_bytes)
    step = pipeline_s + dp_s + optimizer_s
    tokens_step = (ctx.gbs or c.mbs * (lay.dp or 1)) * seq
    flops = model_flops_per_token(m, seq, ctx.mtp_layers) * tokens_step
    tflops = flops / step / c.num_gpus / 1e12
    busiest_terms = {k: v * microbatches for k, v in stage_terms[busiest].items() if ":" not in k}
    by_label = {k.split(":", 1)[1]: v * microbatches for k, v in stage_terms[busiest].items() if ":" in k}
    if by_label:
        busiest_terms["recompute"] = sum(by_label.values())
    out = StepTime(
        terms=busiest_terms,
        recompute_by_label=by_label,
        step_s=step,
        model_flops_per_step=flops,
        tokens_per_step=tokens_step,
        tflops_per_gpu=tflops,
        mfu=tflops / mfu_denominator(gpu),
        mfu_denominator_tflops=mfu_denominator(gpu),
        bubble_fraction=bubble * t_mb / step if step else 0.0,
        balanced_s=sum(stage_times) / c.pp * microbatches,
        stage_terms=tuple(stage_terms),
        layer_terms={k: v for k, v in kinds.items() if len(k) == 2},
        pipeline_factor=microbatches + bubble,
    )
    out.terms["pipeline_bubble"] = bubble * t_mb
    out.terms["dp_sync"] = dp_s
    out.terms["optimizer"] = optimizer_s
    return out


def sync_seconds(ctx: Context, layers, offloaded_state_bytes: float) -> tuple[float, float]:
    """(DP sync, optimizer step) seconds per step when the PP stage holding ``layers`` is the busiest: the
    exposed gradient reduce-scatter and parameter all-gather, and the optimizer's pass over its state."""
    c, lay, gpu = ctx.cfg, ctx.layout, ctx.gpu
    trained = lora_params_per_rank if c.peft == "lora" else _params_per_rank  # a frozen base syncs nothing
    dense_params, expert_params = trained(ctx, layers)
    dp_group = (lay.dp or 1) * c.cp
    dp_s = 0.0
    if dp_group > 1:
        dp_s += 2 * dense_params * 4 * (dp_group - 1) / dp_group / _group_bandwidth(gpu, dp_group, c.tp)
    edp = lay.edp or 1
    if edp > 1:
        dp_s += 2 * expert_params * 4 * (edp - 1) / edp / _group_bandwidth(gpu, edp, lay.ep * lay.etp)
    dp_s *= DP_EXPOSED
    state_bytes = 16 * (dense_params / max(dp_group, 1) + expert_params / max(edp, 1))
    hbm = gpu.hbm_bandwidth_tbps * 1e12
    return dp_s, 2 * state_bytes / hbm + offloaded_state_bytes / CPU_ADAM_BYTES_PER_S


_RANK_LAYERS: dict[int, tuple[PipelineSplit, tuple[tuple[int, ...], ...]]] = {}


def rank_layers(split: PipelineSplit) -> tuple[tuple[int, ...], ...]:
    """Decoder layer indices each PP rank holds, numbered in virtual-stage order (kept per split object:
    hashing a split's nested stages costs more than the answer)."""
    entry = _RANK_LAYERS.get(id(split))
    if entry is not None and entry[0] is split:
        return entry[1]
    if len(_RANK_LAYERS) > 4096:
        _RANK_LAYERS.clear()
    _RANK_LAYERS[id(split)] = (split, out := _rank_layers(split))
    return out


@lru_cache(maxsize=4096)
def _rank_layers(split: PipelineSplit) -> tuple[tuple[int, ...], ...]:
    index = 0
    per_rank: list[list[int]] = [[] for _ in range(split.pp)]
    for v in range(split.vpp):
        for r in range(split.pp):
            count = split.stages[r][v].decoders
            per_rank[r].extend(range(index, index + count))
            index += count
    return tuple(tuple(layers) for layers in per_rank)


def _even_ranges(num_layers: int, pp: int) -> tuple[tuple[int, ...], ...]:
    per = -(-num_layers // pp)
    return tuple(tuple(range(r * per, min(num_layers, (r + 1) * per))) for r in range(pp))


def kind_counts(model: ModelSpec, layers) -> tuple[tuple[tuple[str, bool], int], ...]:
    """How many of the given decoder layers are of each (attention type, MoE?) kind; layers of one kind have
    the same parameters, FLOPs and saved tensors. Cached per layer tuple, which many candidates share."""
    cache = spec_cache(model)
    key = ("kind_counts", tuple(layers))
    if key not in cache:
        counts: dict[tuple[str, bool], int] = {}
        for i in layers:
            k = (model.attention_layer_types[i], model.moe_layers[i])
            counts[k] = counts.get(k, 0) + 1
        cache[key] = tuple(counts.items())
    return cache[key]


def _params_per_rank(ctx: Context, layers) -> tuple[float, float]:
    """(dense, expert) parameters one rank of the given PP stage holds."""
    c, lay, m = ctx.cfg, ctx.layout, ctx.model
    cache = spec_cache(m)
    key = ("rank_param_sums", tuple(layers))
    if key not in cache:
        first: dict = {}
        for i in range(m.num_layers):
            first.setdefault((m.attention_layer_types[i], m.moe_layers[i]), i)
        sharded = replicated = experts = 0
        for k, n in kind_counts(m, layers):
            lp = layer_params(m, first[k])
            sharded += n * (lp.attention + lp.mlp)
            replicated += n * lp.replicated
            experts += n * lp.experts
        cache[key] = (sharded, replicated, experts)
    sharded, replicated, experts = cache[key]
    return sharded / c.tp + replicated, experts / (lay.ep * lay.etp)
