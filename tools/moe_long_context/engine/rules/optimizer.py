"""Optimizer checks: CPU offload and the precision-aware optimizer it builds on."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .table import check, finding


@check("optimizer")
def offload(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.use_precision_aware_optimizer and not c.use_distributed_optimizer:
        yield finding(
            "PRECISION_AWARE_NEEDS_DISTOPT",
            "use_precision_aware_optimizer without the distributed optimizer.",
            "Set use_distributed_optimizer=true (Adam is required too).",
            ["use_precision_aware_optimizer", "use_distributed_optimizer"],
        )
    if c.optimizer_cpu_offload_fraction <= 0:
        if c.optimizer_cpu_offload:
            yield finding(
                "OFFLOAD_FRACTION_ZERO",
                "optimizer_cpu_offload without an offload fraction: Megatron Core's OptimizerConfig default "
                "fraction is 0.0, so nothing is offloaded (Megatron-LM's --optimizer-offload-fraction defaults "
                "to 1.0; Bridge takes Megatron Core's 0.0). The memory estimate counts no offload.",
                "Set optimizer.optimizer_offload_fraction (1.0 offloads all optimizer state), or drop "
                "optimizer.optimizer_cpu_offload.",
                ["optimizer_cpu_offload", "optimizer_cpu_offload_fraction"],
            )
        return
    if not c.use_precision_aware_optimizer:
        code = (
            "OFFLOAD_NEEDS_PRECISION_AWARE"
            if c.launcher == "megatron-lm"
            else "OFFLOAD_WITHOUT_PRECISION_AWARE"
        )
        yield finding(
            code,
            f"Optimizer CPU offload (fraction {c.optimizer_cpu_offload_fraction}) without "
            "use_precision_aware_optimizer.",
            "Set use_precision_aware_optimizer=true (it needs the distributed optimizer and Adam).",
            ["optimizer_cpu_offload_fraction", "use_precision_aware_optimizer"],
        )
    yield finding(
        "OFFLOAD_NEEDS_DECOUPLED_WD",
        f"Optimizer CPU offload of {c.optimizer_cpu_offload_fraction:.0%} of the optimizer state builds a "
        "HybridDeviceOptimizer: Adam with decoupled weight decay (AdamW, the default) or SGD.",
        None,
        ["optimizer_cpu_offload_fraction"],
    )
    if c.fp8_param_gather and c.precision != "fp8-delayed" and c.launcher == "megatron-lm":
        yield finding(
            "OFFLOAD_FP8_PARAM_GATHER",
            f"Optimizer CPU offload with fp8_param_gather and precision={c.precision}.",
            "Drop --fp8-param-gather (the ModelZoo scripts do when offloading), or use --fp8-recipe delayed.",
            ["optimizer_cpu_offload_fraction", "fp8_param_gather"],
        )
    if ctx.graphs_on:
        yield finding(
            "OFFLOAD_GRAPHS_OK",
            "Optimizer CPU offload runs outside the captured graphs; it is compatible with CUDA graphs.",
            None,
            ["optimizer_cpu_offload_fraction"],
        )
