"""Parameters, gradients and optimizer states on one rank (the static part of the memory model).

Megatron-LM ``theoretical_memory_usage.py`` (core_r0.19.0) per rank, with what it leaves out (reference
memory-model.md 1c, 3a, 4d): the distributed optimizer shards dense weights over DP x CP and experts over
EDP (as Megatron Bridge's estimator does), the precision-aware optimizer, BF16 gradient buffers, optimizer
CPU offload, TE's cached FP8 weight copies, and the real pipeline split (MTP layers, embedding copies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..engine.config import precision_is_quantized
from ..engine.context import Context
from ..model.lora import layer_adapters, mtp_adapters
from ..model.params import LayerParams, layer_params, mtp_layer_params, position_embedding_params, spec_cache
from .activations import BF16, FP32
from .terms import Term

# Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP (default 128;
# LM training/tokenizer _vocab_size_with_padding). Bridge keeps a preset (Hugging Face) vocabulary as is.
VOCAB_DIVISIBLE_BY = 128


def padded_vocab(ctx: Context) -> int:
    """Vocabulary rows the embedding and output layer hold across TP."""
    v, t = ctx.model.vocab_size, ctx.cfg.tp
    if ctx.cfg.launcher == "megatron-lm":
        multiple = VOCAB_DIVISIBLE_BY * t
        return math.ceil(v / multiple) * multiple
    return math.ceil(v / t) * t


@dataclass(frozen=True)
class RankParams:
    """Parameters one rank holds, split by optimizer sharding group."""

    dense: float  # TP-sharded and replicated weights, embeddings: distributed optimizer over DP x CP
    experts: float  # routed experts: distributed optimizer over EDP
    gemm: float  # GEMM weights (dense and expert) that FP8 compute caches quantized
    largest_layer: float = 0.0  # the largest decoder layer's share: one Megatron-FSDP unit, all-gathered
    adapter_dense: float | None = None  # LoRA: trained adapter weights of TP-split layers (None: no LoRA)
    adapter_experts: float = 0.0  # LoRA: the routed experts' shared adapters (sharded like experts)

    @property
    def trained(self) -> tuple[float, float]:
        """(dense, expert) parameters with gradients and optimizer states: all of them, or LoRA's adapters (the
        frozen base has neither: DDP and the optimizer skip parameters without requires_grad)."""
        if self.adapter_dense is not None:
            return self.adapter_dense, self.adapter_experts
        return self.dense, self.experts


def _layer_share(lp: LayerParams, tp: int, expert_shards: int) -> tuple[float, float, float]:
    dense = (lp.attention + lp.mlp) / tp + lp.replicated
    experts = lp.experts / expert_shards
    gemm = (lp.attention + lp.mlp) / tp + lp.replicated_gemm + experts
    return dense, experts, gemm


def rank_params(ctx: Context, layers: list[int], mtp: int, embedding: bool, loss: bool) -> RankParams:
    """Parameters on a rank holding decoder ``layers``, ``mtp`` MTP layers and the embedding / loss (kept per
    model for the sharding that decides them: the planner asks for the same ranks under many settings)."""
    c = ctx.cfg
    key = (tuple(layers), mtp, embedding, loss, c.tp, c.ep * ctx.etp, padded_vocab(ctx), *lora_key(c))
    cache = spec_cache(ctx.model).setdefault("rank_params", {})
    found = cache.get(key)
    if found is None:
        if len(cache) > 20_000:
            cache.clear()
        found = cache[key] = _rank_params(ctx, layers, mtp, embedding, loss)
    return found


def _rank_params(ctx: Context, layers: list[int], mtp: int, embedding: bool, loss: bool) -> RankParams:
    m, c = ctx.model, ctx.cfg
    shards = c.ep * ctx.etp
    dense = experts = gemm = largest = 0.0
    for i in layers:
        d, e, g = _layer_share(layer_params(m, i), c.tp, shards)
        dense, experts, gemm, largest = dense + d, experts + e, gemm + g, max(largest, d + e)
    if mtp:
        blocks = m.mtp_weight_blocks(mtp)  # a repeated MTP block holds one set of weights for every depth
        d, e, g = _layer_share(mtp_layer_params(m), c.tp, shards)
        dense, experts, gemm = dense + blocks * d, experts + blocks * e, gemm + blocks * g
    table = padded_vocab(ctx) * m.hidden_size / c.tp
    if embedding:
        dense += table + position_embedding_params(m)
    if mtp and not embedding:
        dense += table  # the MTP stage keeps its own copy of the word embeddings (gpt_model.py mtp_process)
    if loss or (mtp and not loss):
        dense += table  # output layer (untied, or the tied copy on the last stage); a BF16 GEMM, not TE
    if loss:
        dense += m.hidden_size * m.norm_params_per_width  # final norm
    if embedding and loss and m.tie_embeddings:
        dense -= table  # one shared table when the first stage is also the last
    adapter_dense, adapter_experts = _adapter_params(ctx, layers, mtp)
    return RankParams(dense, experts, gemm, largest, adapter_dense, adapter_experts)


def lora_key(c) -> tuple:
    return (c.lora_dim, c.lora_target_modules) if c.peft == "lora" else ()


def _adapter_params(ctx: Context, layers: list[int], mtp: int) -> tuple[float | None, float]:
    """(dense, expert) LoRA adapter weights on a rank holding these layers: zero without LoRA."""
    m, c = ctx.model, ctx.cfg
    if c.peft != "lora":
        return None, 0.0
    adapters = [a for i in layers for a in layer_adapters(m, m.attention_layer_types[i], m.moe_layers[i],
                                                          c.lora_target_modules)]  # fmt: skip
    if mtp:
        adapters += list(mtp_adapters(m, c.lora_target_modules)) * m.mtp_weight_blocks(mtp)
    dense = sum(a.params_per_rank(c.lora_dim, c.tp, ctx.etp) for a in adapters if a.kind != "expert")
    experts = sum(a.params_per_rank(c.lora_dim, c.tp, ctx.etp) for a in adapters if a.kind == "expert")
    return dense, experts


def master_and_moment_bytes(ctx: Context) -> tuple[int, int]:
    """Bytes per parameter of the master weights and of both Adam moments.

    Default: FP32 master + FP32 exp_avg and exp_avg_sq (12 B). The precision-aware optimizer keeps BF16
    moments and, with BF16 parameters, only the 16 low bits of the FP32 master (store_param_remainders,
    on by default: MCore optimizer_config.py, distrib_optimizer.py) - 6 B. With CPU offload Megatron
    builds a HybridDeviceOptimizer instead (optimizer/__init__.py), whose GPU share is an FP32 copy of
    the parameters with FP32 Adam moments (12 B).
    """
    c = ctx.cfg
    if not c.use_precision_aware_optimizer or c.optimizer_cpu_offload_fraction > 0:
        return FP32, 2 * FP32
    return BF16, 2 * BF16


def _parameter_basis(ctx: Context, total: float, gemm: float) -> str:
    if ctx.cfg.fp8_param_gather and precision_is_quantized(ctx.cfg.precision):
        return (
            f"{total / 1e6:,.1f}M params x 2 B: {gemm / 1e6:,.1f}M GEMM weights kept in FP8 (1 B) plus the "
            "column-wise/transposed copy TE builds for backward (1 B), the rest BF16"
        )
    return f"{total / 1e6:,.1f}M params x 2 B (BF16)"


def static_terms(ctx: Context, p: RankParams) -> list[Term]:
    """Parameters, gradients, optimizer states (GPU share) and FP8 weight caches of one rank."""
    c = ctx.cfg
    lay = ctx.layout
    total = p.dense + p.experts
    sharded = (
        c.use_distributed_optimizer or c.use_megatron_fsdp
    )  # FSDP turns it on (Bridge config.py:1073-1076)
    d_dense = (lay.dp or 1) * c.cp if sharded else 1
    d_exp = (lay.edp or 1) if sharded else 1
    grad = FP32 if c.grad_reduce_in_fp32 else BF16
    master, moments = master_and_moment_bytes(ctx)
    state = master + moments
    on_gpu = 1.0 - c.optimizer_cpu_offload_fraction
    t_dense, t_exp = p.trained
    opt = (t_dense * state / d_dense + t_exp * state / d_exp) * on_gpu
    if c.use_megatron_fsdp:
        return _fsdp_terms(ctx, p, d_dense, d_exp, grad, state, opt)
    lora = p.adapter_dense is not None
    adapters = t_dense + t_exp if lora else 0.0
    trained_m = (t_dense + t_exp) / 1e6
    terms = [
        Term("parameters", BF16 * (total + adapters), _parameter_basis(ctx, total, p.gemm)
             + (f" + {adapters / 1e6:,.2f}M LoRA adapter params (rank {c.lora_dim})" if lora else "")),
        Term(
            "gradients",
            grad * (t_dense + t_exp),
            f"{trained_m:,.1f}M x {grad} B ({'FP32' if grad == FP32 else 'BF16'} main-gradient buffer"
            + (", LoRA adapters only: the base is frozen)" if lora else ")"),
        ),
        Term(
            "optimizer states",
            opt,
            f"({master} B master + {moments} B Adam moments) x ({t_dense / 1e6:,.1f}M dense / {d_dense} "
            f"+ {t_exp / 1e6:,.1f}M expert / {d_exp})"
            + (f" x {on_gpu:g} kept on GPU" if on_gpu < 1 else ""),
        ),
    ]  # fmt: skip
    if precision_is_quantized(c.precision) and not c.fp8_param_gather:
        per = 1 if c.precision == "nvfp4" else 2
        terms.append(
            Term(
                "FP8 weight cache",
                per * p.gemm,
                f"{p.gemm / 1e6:,.1f}M GEMM weights x {per} B (TE keeps row- and column-wise quantized "
                "copies across the microbatches of a step)",
            )
        )
    return terms


def _fsdp_terms(ctx: Context, p: RankParams, d_dense: int, d_exp: int, grad: int, state: int, opt: float):
    """Megatron-FSDP optim_grads_params: BF16 weights and main gradients sharded like the optimizer states (dense
    over DP x CP, experts over EDP); each FSDP unit (a decoder layer) is all-gathered while it runs, and the next one
    is prefetched, so two units are whole on the GPU at a time."""
    share = p.dense / d_dense + p.experts / d_exp
    t_dense, t_exp = p.trained
    trained = t_dense / d_dense + t_exp / d_exp
    gathered = 2 * BF16 * p.largest_layer
    terms = [
        Term("parameters (Megatron-FSDP shard)", BF16 * share, f"{share / 1e6:,.1f}M params x 2 B"),
        Term("gradients (Megatron-FSDP shard)", grad * trained, f"{trained / 1e6:,.1f}M x {grad} B"),
        Term(
            "optimizer states",
            opt,
            f"{state} B per parameter x ({p.dense / 1e6:,.1f}M dense / {d_dense} + {p.experts / 1e6:,.1f}M expert "
            f"/ {d_exp})",
        ),
        Term(
            "Megatron-FSDP all-gathered units",
            gathered,
            "two decoder layers' BF16 weights (running + prefetch)",
        ),
    ]
    c = ctx.cfg
    if precision_is_quantized(c.precision) and not c.fp8_param_gather:
        per = 1 if c.precision == "nvfp4" else 2
        terms.append(
            Term("FP8 weight cache", per * p.gemm / max(1, d_dense), "quantized copies of the shard")
        )
    return terms


def step_grad_copy_bytes(ctx: Context, p: RankParams) -> float:
    """The FP32 gradients the optimizer step allocates: with a BF16 gradient buffer Megatron hands the optimizer
    ``shard_model_grad.float()``, a new FP32 tensor per shard, unless the precision-aware optimizer takes the BF16
    view (MCore 0.19.2 distrib_optimizer.py:2774-2782; ``use_precision_aware_optimizer_no_fp8_or_ds_fp8``,
    optimizer_config.py:404-411: precision-aware with no FP8 recipe, delayed scaling or CPU offload). They live
    through the step, after the activations are freed; an FP32 gradient buffer needs no copy."""
    c = ctx.cfg
    if c.grad_reduce_in_fp32:
        return 0.0
    decoupled = c.use_precision_aware_optimizer and (
        c.precision in ("bf16", "fp8-delayed") or c.optimizer_cpu_offload_fraction > 0
    )
    if decoupled:
        return 0.0
    lay = ctx.layout
    d_dense = (lay.dp or 1) * c.cp if c.use_distributed_optimizer else 1
    d_exp = (lay.edp or 1) if c.use_distributed_optimizer else 1
    t_dense, t_exp = p.trained
    return FP32 * (t_dense / d_dense + t_exp / d_exp) * (1.0 - c.optimizer_cpu_offload_fraction)


def optimizer_assumption(ctx: Context) -> str:
    c = ctx.cfg
    master, moments = master_and_moment_bytes(ctx)
    text = (
        f"Parameters BF16 (2 B); gradients {'FP32 (4 B)' if c.grad_reduce_in_fp32 else 'BF16 (2 B)'}; "
        f"optimizer states {master} B master + {moments} B Adam moments per parameter"
    )
    if c.use_precision_aware_optimizer and c.optimizer_cpu_offload_fraction == 0:
        text += " (precision-aware optimizer: BF16 moments, 16-bit remainders of the FP32 master)"
    if c.use_megatron_fsdp:
        text += (
            "; Megatron-FSDP (optim_grads_params) shards weights, gradients and optimizer states over DP x CP "
            "(dense) and EDP (experts) and all-gathers two decoder layers at a time"
        )
    elif c.use_distributed_optimizer:
        text += ", sharded over DP x CP (dense weights) and EDP (routed experts) by the distributed optimizer"
    else:
        text += ", not sharded (no distributed optimizer)"
    if c.peft == "lora":
        text += (
            f"; LoRA (rank {c.lora_dim} on {', '.join(c.lora_target_modules)}): the base weights are frozen, so "
            "only the adapters have gradients and optimizer states (Bridge peft/base.py freeze_model; MCore DDP and "
            "the optimizer skip parameters without requires_grad)"
        )
    if c.optimizer_cpu_offload_fraction:
        text += (
            f"; {c.optimizer_cpu_offload_fraction:.0%} of them on the CPU (HybridDeviceOptimizer; its GPU share keeps "
            "FP32 master and moments)"
        )
    return text + "."
