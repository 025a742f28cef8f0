"""estimate_throughput: step time, tokens/s and model TFLOP/s per GPU of a configuration the user already has.

It is the planner's step-time model (``engine/step_time.py``) called on the configuration as given: the same
function plan_layout ranks its plans with, with the recompute and optimizer offload the configuration sets, so
a user's own layout and a plan compare term by term.
"""

from __future__ import annotations

from pydantic import Field

from ..engine.config import LoraRequestArgs, TrainingConfig, TrainingRequestArgs, lora_config
from ..engine.context import build_context
from ..engine.findings import Finding, Judged, has_errors, sort_findings
from ..engine.rules import run
from ..engine.rules.upstream import coverage
from ..engine.stated_error import basis, stated_error
from ..engine.step_time import ASSUMPTIONS, step_time
from ..errors import InputError
from .estimate_memory import ESTIMATE_FAMILIES, require_seq_len
from .step_findings import dominant_term_findings
from .step_mamba_split import mamba_split_findings


class EstimateThroughputRequest(LoraRequestArgs, TrainingRequestArgs):
    """A complete training configuration (gpu and seq_len required) to estimate the step time of."""


class EstimateThroughputResult(Judged):
    valid: bool = Field(
        description="True when no finding is an error (Megatron would accept the configuration)."
    )
    step_s: float | None = Field(description="Estimated seconds per training step; None when not valid.")
    tokens_per_step: int | None = Field(description="GBS x sequence length.")
    tokens_per_s: float | None = Field(description="Tokens per second for the whole job.")
    tokens_per_s_range: list[float] | None = Field(
        description="tokens_per_s within the model's stated error: [low, high]."
    )
    tflops_per_gpu: float | None = Field(description="Model TFLOP/s per GPU (Megatron's FLOPs formula).")
    mfu: float | None = Field(description="tflops_per_gpu / dense FP8 peak (Megatron Bridge's denominator).")
    mfu_denominator_tflops: float | None = Field(description="The peak MFU is taken against, TFLOP/s.")
    microbatches: int | None = Field(description="Microbatches per step per DP rank.")
    bubble_fraction: float | None = Field(description="Share of the step the pipeline bubble takes.")
    terms_s: dict[str, float] = Field(
        description="Seconds per step by term on the busiest pipeline stage, largest first."
    )
    recompute_by_label_s: dict[str, float] = Field(
        description="The recompute term split by the label (or 'full') that replays the work."
    )
    stated_error: float = Field(
        description="Relative error the model states on tokens/s and TFLOP/s: the calibration's measured spread for "
        "the model's family (assumptions say what it rests on)."
    )
    assumptions: list[str] = Field(description="Every constant and simplification of the model.")
    findings: list[Finding]


def estimate_throughput(req: EstimateThroughputRequest) -> EstimateThroughputResult:
    result = estimate_throughput_config(TrainingConfig(**lora_config(req.model_dump(exclude_unset=True))))
    return result.model_copy(update={"not_checked": [*req.lora_not_checked(), *result.not_checked]})


def estimate_throughput_config(cfg: TrainingConfig) -> EstimateThroughputResult:
    """estimate_throughput of a full TrainingConfig: also the settings only a launch or recipe carries (the
    TransformerConfig-only fields, e.g. BF16 edge layers), as the calibration reads its recipes."""
    require_seq_len(cfg)
    if cfg.gpu is None:
        raise InputError(
            "gpu", None, "a GPU catalog id (h100, h200, b200, b300, gb200, gb300): time needs a GPU"
        )
    ctx = build_context(cfg)
    error = stated_error("throughput", ctx.model.family)
    assumptions = [*ASSUMPTIONS, "Stated error " + basis("throughput", ctx.model.family) + "."]
    if cfg.peft == "lora":
        assumptions.append(
            f"LoRA rank {cfg.lora_dim}: the frozen base runs its GEMMs forward and input gradient only (2x forward, "
            "not 3x), the adapters' skinny GEMMs are priced as HBM traffic, and only the adapters sync and step; "
            "model TFLOP/s and MFU keep the full 3x count, as Bridge reports them for these models "
            "(training/utils/flop_utils.py)."
        )
    findings = sort_findings(run(ctx, ESTIMATE_FAMILIES))
    empty = dict.fromkeys(
        ("step_s", "tokens_per_step", "tokens_per_s", "tokens_per_s_range", "tflops_per_gpu", "mfu",
         "mfu_denominator_tflops", "microbatches", "bubble_fraction")
    )  # fmt: skip
    if has_errors(findings) or ctx.split.split is None or ctx.num_microbatches is None:
        return EstimateThroughputResult(
            valid=False, **empty, terms_s={}, recompute_by_label_s={}, stated_error=error,
            assumptions=assumptions, findings=findings, **coverage(cfg, ctx.model),
        )  # fmt: skip
    st = step_time(ctx)
    findings = sort_findings(findings + dominant_term_findings(ctx, st) + mamba_split_findings(ctx, st))
    rate = st.tokens_per_step / st.step_s
    return EstimateThroughputResult(
        valid=True,
        step_s=round(st.step_s, 4),
        tokens_per_step=st.tokens_per_step,
        tokens_per_s=round(rate, 1),
        tokens_per_s_range=[round(rate * max(0.0, 1 - error), 1), round(rate * (1 + error), 1)],
        tflops_per_gpu=round(st.tflops_per_gpu, 1),
        mfu=round(st.mfu, 4),
        mfu_denominator_tflops=st.mfu_denominator_tflops,
        microbatches=ctx.num_microbatches,
        bubble_fraction=round(st.bubble_fraction, 4),
        terms_s={k: round(v, 4) for k, v in sorted(st.terms.items(), key=lambda kv: -kv[1])},
        recompute_by_label_s={k: round(v, 4) for k, v in sorted(st.recompute_by_label.items())},
        stated_error=error,
        assumptions=assumptions,
        findings=findings,
        **coverage(cfg, ctx.model),
    )
