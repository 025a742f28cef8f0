"""plan_layout's request and result models: what a plan is, and how it compares with a published layout."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..dialects.shell import quote
from ..engine.config import MAX_GPUS, MAX_SEQ_LEN, Dispatcher, LoraRequestArgs, Precision, _Args
from ..engine.findings import Finding, Judged

# A safety limit on full evaluations (rules + memory + recompute + time) per request: the bounds end the search
# long before it on every benchmark job (tests/test_plan_bounds.py); a result that reaches it says optimal false.
MAX_EVALUATED = 2000


class PlanLayoutRequest(LoraRequestArgs, _Args):  # bases in reverse order of the fields
    model: str | dict[str, Any] = Field(description="Catalog model id or a Hugging Face config.json object.")
    gpu: str = Field(description="GPU catalog id: h100, h200, b200, b300, gb200, gb300.")
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs in the job.")
    seq_len: int = Field(ge=256, le=MAX_SEQ_LEN, description="Training sequence length in tokens.")
    gbs: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQ_LEN,
        description="Global batch size every plan and the published layout are compared at. Unset: the "
        "published layout's batch for this job if there is one, else the largest power of two of sequences within 2^23 tokens (32 at 200K).",
    )
    precision: Precision | None = Field(
        default=None,
        description="Precision to plan for. Unset: the GPU's usual FP8 recipe (MXFP8 on Blackwell, FP8 "
        "blockwise on Hopper).",
    )
    dispatcher: Dispatcher | None = Field(
        default=None,
        description="Token dispatcher. Unset: HybridEP on NVL72, DeepEP on 8-GPU NVLink systems.",
    )
    allow_optimizer_offload: bool = Field(
        default=True, description="Allow optimizer CPU offload when recompute alone does not fit."
    )
    overhead_gib: float | None = Field(
        allow_inf_nan=False,
        default=None,
        ge=0.0,
        le=1024.0,
        description="GiB each GPU keeps outside allocated tensors (CUDA context, NCCL, fragmentation); every "
        "plan must fit with it. Unset: the memory model's default. Raise it to plan with more headroom.",
    )
    headroom: float = Field(
        allow_inf_nan=False,
        default=0.05,
        ge=0.0,
        le=0.5,
        description="Share of usable HBM every plan leaves free (0.05 = 5 %) on top of the overhead.",
    )
    launcher: str = Field(default="bridge", description="bridge or megatron-lm (which checks apply).")
    top_n: int = Field(default=5, ge=1, le=20, description="How many plans to return.")


class PlanMemory(BaseModel):
    peak_gib: float
    usable_gib: float
    stages: list[dict[str, Any]] = Field(
        description="Per PP stage shown (first, last, most loaded): components."
    )


class PlanThroughput(BaseModel):
    step_s: float = Field(description="Estimated seconds per step.")
    tokens_per_s: float = Field(description="Tokens per second for the whole job.")
    tflops_per_gpu: float = Field(description="Model TFLOP/s per GPU (Megatron's FLOPs formula).")
    mfu: float = Field(description="tflops_per_gpu / dense FP8 peak (Megatron Bridge's denominator).")
    terms_s: dict[str, float] = Field(description="Seconds per step by term on the busiest stage.")


class Plan(BaseModel):
    rank: int
    layout: str = Field(description="e.g. 'TP1 CP32 PP8 VPP4 EP32 ETP1 DP1 EDP1'.")
    settings: dict[str, Any] = Field(description="Every engine field the plan sets (the request fields).")
    memory: PlanMemory
    throughput: PlanThroughput
    why: list[str] = Field(description="What decides this plan's place in the ranking.")
    megatron_args: list[str] = Field(
        description="Megatron-LM flags of the plan's settings; a launch puts the result's megatron_model_args before "
        "them. Empty for a LoRA plan: Megatron-LM has no LoRA."
    )
    bridge_overrides: list[str] = Field(description="Megatron Bridge key=value overrides.")
    bridge_snippet: str = Field(
        description="Python applying the overrides to a Bridge recipe's ConfigContainer."
    )
    findings: list[Finding] = Field(description="Warnings and info the engine reports on this plan.")
    tied_with_top: bool = Field(
        description="Tokens/s within the step-time model's stated error of the top plan's: a tie."
    )
    vpp_variants: list[dict[str, Any]] = Field(
        description="The same plan with other VPP (and split) the search evaluated: vpp, tokens_per_s, peak_gib "
        "(grouped, not ranked)."
    )


class ReferenceComparison(BaseModel):
    """A published layout (engine/layouts.yaml) for the same job, and how the plans compare with it."""

    id: str
    title: str
    source: str
    layout: str
    settings: dict[str, Any] = Field(
        description="The engine fields evaluated: the published layout at the plans' GBS."
    )
    valid: bool = Field(description="No error finding from the engine's rules.")
    fits: bool = Field(description="The memory model estimates it fits the GPU.")
    peak_gib: float | None
    tflops_per_gpu: float | None
    tokens_per_s: float | None = Field(description="At the plans' global batch.")
    rank: int | None = Field(
        description="Its place among the feasible plans (1 = fastest); None if it does not fit the budget or "
        "has another dispatcher or precision than the request."
    )
    verdict: str = Field(description="Why the top plan is (or is not) preferred, by the step-time terms.")


class PlanLayoutResult(Judged):
    def counts(self) -> str:
        """How many layouts the search saw, evaluated and found feasible (the published layouts that fit are
        feasible plans too, so there may be more feasible plans than evaluated candidates)."""
        published = {0: "", 1: " and the published layout"}.get(
            len(self.references), " and the published layouts"
        )
        return (
            f"{self.candidates} candidates, {self.evaluated} evaluated in full; {self.feasible} feasible of "
            f"those{published}"
        )

    def render_text(self) -> str:
        """A compact summary for people: one line per plan, then each plan's reasons and overrides."""
        lines = [f"{self.counts()}; GBS {self.gbs} for every plan, {self.headroom:.0%} headroom", ""]
        if self.no_plan_reason:
            lines += [f"no plan: {self.no_plan_reason}", ""]
        for p in self.plans:
            s = p.settings
            recompute = s.get("recompute_granularity") or "none"
            if recompute == "selective":
                recompute = ",".join(s.get("recompute_modules") or [])
            elif recompute == "full":
                recompute = f"full {s.get('recompute_method')} x{s.get('recompute_num_layers')}"
            offload = s.get("optimizer_cpu_offload_fraction") or 0
            lines.append(
                f"#{p.rank}  {p.layout}  cp_comm={s.get('cp_comm_type') or '-'}  recompute={recompute}  "
                f"offload={offload:.0%}  peak {p.memory.peak_gib:.1f}/{p.memory.usable_gib:g} GiB  "
                f"{p.throughput.tokens_per_s:,.0f} tok/s  {p.throughput.tflops_per_gpu:.0f} TFLOP/s/GPU  "
                f"MFU {p.throughput.mfu:.1%}{'  (tie)' if p.tied_with_top and p.rank > 1 else ''}"
            )
        for ref in self.references:
            lines += ["", f"published: {ref.title} ({ref.layout}): {ref.tflops_per_gpu} TFLOP/s/GPU, "
                      f"{'rank ' + str(ref.rank) if ref.rank else 'not ranked'}; {ref.verdict}"]  # fmt: skip
        for p in self.plans:
            lines += [
                "",
                f"#{p.rank} {p.layout}",
                *(f"  - {w}" for w in p.why),
                "  Bridge overrides (shell words):",
            ]
            lines += [f"    {quote(o)}" for o in p.bridge_overrides]
        return "\n".join(lines)

    valid: bool = Field(description="False when no plan fits; no_plan_reason says why.")
    gbs: int = Field(description="The global batch every plan and the published layout use.")
    headroom: float = Field(description="Share of usable HBM every plan leaves free.")
    no_plan_reason: str | None = Field(description="Why there is no plan (None when there are plans).")
    excluded: dict[str, int] = Field(description="Candidates left out, counted by the reason.")
    plans: list[Plan]
    megatron_model_args: list[str] = Field(
        description="Megatron-LM flags that build the model (shapes, norm, MLP activation, biases, router, "
        "attention variant), shared by every plan: a Megatron-LM launch is these, then a plan's megatron_args. What "
        "they cannot write is in assumptions."
    )
    references: list[ReferenceComparison] = Field(
        description="Published layouts for this model, GPU, GPU count and sequence length, evaluated the same way."
    )
    candidates: int = Field(
        description="Layouts enumerated (TP, CP, PP, VPP, EP, MBS), before any exclusion."
    )
    evaluated: int = Field(description="Candidates evaluated in full (rules, memory, recompute, time).")
    optimal: bool = Field(
        description="The plans are the fastest of every candidate within the model: the search ended when "
        "no candidate left could enter them (false only if the safety limit on evaluations stopped it)."
    )
    pruned_by_bound: int = Field(
        description="Candidates left out because a lower bound of their plan could not enter the top plans."
    )
    feasible: int = Field(
        description="Evaluated candidates (and published layouts) that pass every rule and fit the budget."
    )
    assumptions: list[str]
    findings: list[Finding]


# --------------------------------------------------------------------------- candidates
