"""Precision checks: FP8/FP4 recipe against the GPU, GEMM shape alignment, FP8 parameter gather."""

from __future__ import annotations

from collections.abc import Iterator

from ..config import precision_is_fp8, precision_is_quantized
from ..context import Context
from ..findings import Finding
from .table import check, finding

# Row-count multiples TE 2.14 needs on GEMM inputs: 8 for any FP8/FP4 execution (assert_dim_for_fp8_exec),
# then the recipe's block: MXFP8 32, NVFP4 16, FP8 blockwise 128.
ROW_MULTIPLE = {
    "fp8-delayed": 8,
    "fp8-tensorwise": 8,
    "fp8-blockwise": 128,
    "mxfp8": 32,
    "nvfp4": 16,
}

RECIPE_SUPPORT = {
    "fp8-delayed": "compute capability 8.9 or newer",
    "fp8-tensorwise": "compute capability 8.9 or newer",
    "fp8-blockwise": "compute capability 9.0 or newer with CUDA 12.9",
    "mxfp8": "compute capability 10.x-11.x (Blackwell data-centre GPUs)",
    "nvfp4": "compute capability 10.0 or newer",
}


@check("precision")
def recipe_on_gpu(ctx: Context) -> Iterator[Finding]:
    c, gpu = ctx.cfg, ctx.gpu
    if gpu is None or not precision_is_quantized(c.precision):
        return
    if c.precision not in gpu.quant_recipes:
        yield finding(
            "PRECISION_GPU",
            f"precision={c.precision} on {gpu.name} (sm {gpu.compute_capability[0]}.{gpu.compute_capability[1]}): "
            f"Transformer Engine 2.14 needs {RECIPE_SUPPORT[c.precision]}.",
            f"Use one of {[*gpu.quant_recipes, 'bf16']}.",
            ["precision", "gpu"],
        )
    elif gpu.compute_capability[0] >= 10 and c.precision in ("fp8-delayed", "fp8-tensorwise"):
        yield finding(
            "PRECISION_ADVICE",
            f"{c.precision} on {gpu.name}: Megatron Bridge's Blackwell recipes use MXFP8 (block scaling in "
            "hardware).",
            "Consider precision=mxfp8.",
            ["precision"],
        )


@check("precision")
def gemm_shapes(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    tokens = ctx.tokens_per_rank
    if tokens is None or not precision_is_quantized(c.precision):
        return
    split = c.cp * (c.tp if ctx.sequence_parallel else 1)
    if c.seq_len % split or (c.cp > 1 and c.seq_len % (2 * c.cp)):
        return  # the sequence does not split at all: the sequence rules report that
    rows = tokens * c.mbs
    multiple = ROW_MULTIPLE[c.precision]
    if rows % multiple:
        yield finding(
            "PRECISION_SHAPE",
            f"{c.precision} GEMMs see MBS x seq/(CP{' x TP' if ctx.sequence_parallel else ''}) = {rows} rows, "
            f"not a multiple of {multiple}.",
            f"Choose seq_len, CP, TP and MBS so that the rows per rank are a multiple of {multiple}.",
            ["seq_len", "mbs", "cp", "tp", "precision"],
        )


@check("precision")
def param_gather(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if not c.fp8_param_gather:
        return
    if not precision_is_fp8(c.precision):  # fp8_param needs fp8 mode, NVFP4 included
        yield finding(
            "PRECISION_PARAM_GATHER",
            f"fp8_param_gather with precision={c.precision}: FP8 parameters need an FP8 recipe.",
            "Use an FP8 precision, or drop fp8_param_gather.",
            ["fp8_param_gather", "precision"],
        )
    elif not c.use_distributed_optimizer and c.launcher == "megatron-lm":  # Bridge has no such check
        yield finding(
            "PRECISION_PARAM_GATHER",
            "fp8_param_gather without the distributed optimizer: Megatron-LM refuses it.",
            "Set use_distributed_optimizer=true, or drop fp8_param_gather.",
            ["fp8_param_gather", "use_distributed_optimizer"],
        )
    elif c.precision == "mxfp8" and c.launcher == "bridge" and not c.reuse_grad_buf_for_mxfp8_param_ag:
        yield finding(
            "PRECISION_PARAM_GATHER",
            "fp8_param_gather with MXFP8 in Megatron Bridge needs reuse_grad_buf_for_mxfp8_param_ag "
            "(the bf16_with_mxfp8_mixed preset sets it).",
            "Set mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=true.",
            ["fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag"],
        )
