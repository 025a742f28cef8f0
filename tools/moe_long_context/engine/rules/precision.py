"""Precision checks: FP8/FP4 recipe against the GPU, GEMM shape alignment, FP8 parameter gather."""

from __future__ import annotations

from collections.abc import Iterator

from ...model.specs import GpuSpec
from ..config import precision_is_fp8, precision_is_quantized
from ..context import Context
from ..findings import Finding
from .table import check, finding

# Row-count multiples TE 2.14 needs on the local (pre-all-gather) GEMM input: 8 for any FP8/FP4 execution
# (pytorch/utils.py:479-489 assert_dim_for_fp8_exec, called at module/linear.py:175-176), then the recipe's
# quantizer block: MXFP8 32 (csrc/quantizer.cpp:1349-1351), NVFP4 16 (quantizer.cpp:1742-1746). FP8 blockwise
# has no block constraint on rows (float8_blockwise_tensor.py:195-204 is_quantizable only picks a BF16
# all-gather; TE quantization.py:119-125 and MCore fp8_utils.py:318-323 align it to 16, below).
ROW_MULTIPLE = {
    "fp8-delayed": 8,
    "fp8-tensorwise": 8,
    "fp8-blockwise": 8,
    "mxfp8": 32,
    "nvfp4": 16,
}

# The weight-gradient GEMM (general_gemm(x, dy, layout="NT"), module/linear.py:849-883) has the token count of
# the gathered input (MBS x seq / CP) as its inner dimension k. cuBLASLt needs k % 16 == 0 for block scaling on
# every GPU (common/gemm/cublaslt_gemm.cu:209-210, :292-295) and for FP8 tensor scaling on GPUs that run FP8
# GEMMs only as TN (cublaslt_gemm.cu:135-162; transformer_engine.cpp:1099-1112: non-TN only on sm 10.x-11.x
# and >= 13.0), where the transposed copy is used with lda = k.
GATHERED_ROW_MULTIPLE = 16


def gathered_multiple(precision: str, gpu: GpuSpec | None) -> int | None:
    """16 when the wgrad GEMM needs MBS x seq / CP divisible by 16, else None (or unknown without a GPU)."""
    if precision == "fp8-blockwise":
        return GATHERED_ROW_MULTIPLE
    if precision in ("fp8-delayed", "fp8-tensorwise") and gpu is not None:
        major = gpu.compute_capability[0]
        tn_only = major < 10 or major == 12
        return GATHERED_ROW_MULTIPLE if tn_only else None
    return None


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
        return
    gathered = gathered_multiple(c.precision, ctx.gpu)
    total = c.mbs * (c.seq_len // c.cp)
    if gathered and total % gathered:
        where = (
            "with block scaling"
            if c.precision == "fp8-blockwise"
            else f"on {ctx.gpu.name} (TN-only FP8 GEMMs)"
        )
        yield finding(
            "PRECISION_SHAPE",
            f"{c.precision} weight-gradient GEMMs {where} have MBS x seq/CP = {total} tokens as their inner "
            f"dimension, not a multiple of {gathered}.",
            f"Choose seq_len, CP and MBS so that MBS x seq/CP is a multiple of {gathered}.",
            ["seq_len", "mbs", "cp", "precision"],
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
    elif (
        c.precision == "mxfp8"
        and c.launcher == "bridge"
        and not c.reuse_grad_buf_for_mxfp8_param_ag
        and not c.use_megatron_fsdp  # Bridge asserts it only without FSDP, which turns it off (config.py:1349-1359)
    ):
        yield finding(
            "PRECISION_PARAM_GATHER",
            "fp8_param_gather with MXFP8 in Megatron Bridge needs reuse_grad_buf_for_mxfp8_param_ag "
            "(the bf16_with_mxfp8_mixed preset sets it).",
            "Set mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=true.",
            ["fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag"],
        )
