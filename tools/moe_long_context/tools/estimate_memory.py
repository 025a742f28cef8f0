"""estimate_memory: per-rank GPU memory of a full training configuration, and whether it fits.

The numbers come from ``memory.py``; this module turns them into the tool's result (GiB, per PP stage,
per component, with the assumptions) and adds the findings: the engine's rule checks on the same
configuration, plus ``MEMORY_OVER_BUDGET`` when the estimate exceeds the GPU (an engine estimate, not a
Megatron rule, so a warning).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..engine.config import LoraRequestArgs, TrainingConfig, TrainingRequestArgs, lora_config
from ..engine.context import Context, build_context
from ..engine.findings import Finding, Judged, has_errors, sort_findings
from ..engine.rules import FAMILIES, finding, run
from ..engine.rules.upstream import coverage
from ..engine.stated_error import basis, stated_error
from ..errors import InputError
from ..memory.rank_memory import MemoryModel, RankMemory, memory_model, overhead_gib
from ..memory.terms import GIB

# Every rule family but the launch's own (estimate_memory gets no launch text) and memory (its own verdict).
ESTIMATE_FAMILIES = tuple(family for family in FAMILIES if family not in ("launch", "memory"))


class EstimateMemoryRequest(LoraRequestArgs, TrainingRequestArgs):
    """A complete training configuration to estimate per-rank memory for (seq_len is required)."""


class MemoryComponent(BaseModel):
    component: str = Field(description="What the memory holds, e.g. 'optimizer states'.")
    gib: float = Field(description="GiB (2^30 bytes) on this rank at its peak.")
    basis: str = Field(
        description="How the number was computed: counts, bytes per element, in-flight microbatches."
    )


class StageBreakdown(BaseModel):
    pp_rank: int = Field(description="Pipeline rank.")
    role: str = Field(description="first, last, first and last (PP = 1), or most loaded (a middle rank).")
    decoder_layers: str = Field(
        description="Decoder layer indices on this rank (0-based), e.g. '0, 15-16, 31-32'."
    )
    layer_kinds: str = Field(description="What those layers are: dense/MoE MLP and attention type.")
    extras: str = Field(description="Embedding, loss and MTP layers held by this rank.")
    in_flight_microbatches: list[int] = Field(
        description="Microbatches whose activations each virtual stage holds at the peak."
    )
    total_gib: float = Field(description="Sum of the components.")
    components: list[MemoryComponent]


class EstimateMemoryResult(Judged):
    valid: bool = Field(
        description="True when no finding is an error (Megatron would accept the configuration)."
    )
    peak_gib: float | None = Field(description="Largest per-rank total, GiB; None if it cannot be estimated.")
    peak_pp_rank: int | None = Field(description="The PP rank with that peak.")
    usable_gib: float | None = Field(
        description="Memory PyTorch can allocate on the GPU, GiB; None without a GPU."
    )
    fits: bool | None = Field(description="peak_gib <= usable_gib; None without a GPU or an estimate.")
    headroom_gib: float | None = Field(description="usable_gib - peak_gib (negative when it does not fit).")
    overhead_gib: float = Field(
        description="Memory beyond the tensors in the peak rank's total: allocator cache and memory outside "
        "PyTorch (measured in the calibration corpus), or overhead_gib as given."
    )
    stated_error: float = Field(
        description="Relative error the model states on peak_gib: the calibration's measured spread for the "
        "model's family (assumptions say what it rests on)."
    )
    breakdown: list[StageBreakdown] = Field(
        description="Per PP stage (first, last and the most loaded), per component."
    )
    assumptions: list[str] = Field(description="Everything the numbers assume.")
    findings: list[Finding]


def _ranges(indices: list[int]) -> str:
    if not indices:
        return "none"
    parts, start, prev = [], indices[0], indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def _kinds(ctx: Context, layers: list[int]) -> str:
    m = ctx.model
    if not layers:
        return "none"
    moe = sum(m.moe_layers[i] for i in layers)
    with_mlp = sum(m.layer_has_mlp(m.attention_layer_types[i]) for i in layers)
    counts = []
    if with_mlp - moe:
        counts.append(f"{with_mlp - moe} dense")
    if moe:
        counts.append(f"{moe} MoE")
    types = [m.attention_layer_types[i] for i in layers]
    attention = "MLA" if m.is_mla else "GQA"
    kinds = [
        f"{types.count(t)} {label}"
        for t, label in (
            ("full", attention),
            ("sliding", "sliding-window"),
            ("linear", "Gated DeltaNet"),
            ("dsa", "MLA + DSA indexer"),
            ("mamba", "Mamba-2"),
        )
        if types.count(t)
    ]
    return " + ".join(counts) + " MLP; attention " + ", ".join(kinds)


def _extras(mem: RankMemory) -> str:
    parts = [n for n, on in (("embedding", mem.embedding), ("loss", mem.loss)) if on]
    if mem.mtp_layers:
        parts.append(f"{mem.mtp_layers} MTP layer(s)")
    return ", ".join(parts) or "none"


def stage_breakdown(ctx: Context, mem: RankMemory, role: str) -> StageBreakdown:
    return StageBreakdown(
        pp_rank=mem.pp_rank,
        role=role,
        decoder_layers=_ranges(mem.layers),
        layer_kinds=_kinds(ctx, mem.layers),
        extras=_extras(mem),
        in_flight_microbatches=mem.in_flight,
        total_gib=round(mem.total / GIB, 3),
        components=[
            MemoryComponent(component=t.name, gib=round(t.bytes / GIB, 3), basis=t.basis) for t in mem.terms
        ],
    )


def breakdown(ctx: Context, model: MemoryModel) -> list[StageBreakdown]:
    """The first and last stages, and the most loaded one when it is a middle stage."""
    first, last, peak = model.ranks[0], model.ranks[-1], model.peak_rank
    if first is last:
        return [stage_breakdown(ctx, first, "first and last")]
    out = [stage_breakdown(ctx, first, "first")]
    if peak not in (first, last):
        out.append(stage_breakdown(ctx, peak, "most loaded"))
    out.append(stage_breakdown(ctx, last, "last"))
    return out


def memory_findings(ctx: Context, model: MemoryModel | None) -> list[Finding]:
    """The engine's memory verdicts (not Megatron rules)."""
    if model is None:
        return [
            finding(
                "MEMORY_NOT_ESTIMATED",
                "Memory was not estimated: the layout or the pipeline split has errors (see the other findings).",
                "Fix the error findings first (check_dp_budget proposes accepted layouts).",
                ["pp", "pipeline_layout", "num_gpus"],
            )
        ]
    if ctx.gpu is None:
        return [
            finding(
                "MEMORY_NO_GPU",
                f"No GPU given: peak {model.peak_rank.total / GIB:.1f} GiB per rank, fit not checked.",
                "Pass gpu (h100, h200, b200, b300, gb200, gb300) to check the fit.",
                ["gpu"],
            )
        ]
    peak = model.peak_rank.total / GIB
    usable = ctx.gpu.usable_hbm_gib
    if peak <= usable:
        return []
    return [
        finding(
            "MEMORY_OVER_BUDGET",
            f"Estimated peak {peak:.1f} GiB on PP rank {model.peak_rank.pp_rank} exceeds the {usable:g} GiB "
            f"{ctx.gpu.name} provides (by {peak - usable:.1f} GiB).",
            "Run pick_recompute: it chooses recompute modules and lists the next steps (optimizer CPU offload, "
            "more CP/TP/PP, smaller MBS) with the GiB each buys.",
            ["recompute_modules", "optimizer_cpu_offload_fraction", "cp", "tp", "pp", "mbs"],
        )
    ]


def require_seq_len(cfg: TrainingConfig) -> None:
    if cfg.seq_len is None:
        raise InputError("seq_len", None, "a sequence length in tokens: activation memory depends on it")


def estimate_memory(req: EstimateMemoryRequest) -> EstimateMemoryResult:
    result = estimate_memory_config(TrainingConfig(**lora_config(req.model_dump(exclude_unset=True))))
    return result.model_copy(update={"not_checked": [*req.lora_not_checked(), *result.not_checked]})


def estimate_memory_config(cfg: TrainingConfig) -> EstimateMemoryResult:
    """estimate_memory of a full TrainingConfig: also what only a launch or recipe carries (LoRA, BF16 edge
    layers), as lint's corrected config and the recipe tests read them."""
    require_seq_len(cfg)
    ctx = build_context(cfg)
    model = memory_model(ctx)
    findings = sort_findings(run(ctx, ESTIMATE_FAMILIES) + memory_findings(ctx, model))
    usable = ctx.gpu.usable_hbm_gib if ctx.gpu is not None else None
    peak = round(model.peak_rank.total / GIB, 3) if model is not None else None
    return EstimateMemoryResult(
        valid=not has_errors(findings),
        peak_gib=peak,
        peak_pp_rank=model.peak_rank.pp_rank if model is not None else None,
        usable_gib=usable,
        fits=(peak <= usable) if peak is not None and usable is not None else None,
        headroom_gib=round(usable - peak, 3) if peak is not None and usable is not None else None,
        overhead_gib=round(model.overhead_gib, 3) if model is not None else overhead_gib(ctx),
        stated_error=stated_error("memory", ctx.model.family),
        breakdown=breakdown(ctx, model) if model is not None else [],
        assumptions=(
            [*model.assumptions, "Stated error " + basis("memory", ctx.model.family) + "."]
            if model is not None
            else []
        ),
        findings=findings,
        **coverage(cfg, ctx.model),
    )
