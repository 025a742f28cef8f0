"""Findings when one term dominates the estimated step: what takes the time, the setting that would cut it, and
the gain, computed by re-running the step-time model with that setting.

A term dominates when it takes more than ``DOMINANT_SHARE`` of the step. Each alternative is a changed
configuration that must pass every rule (the same families estimate_throughput checks) before its step time is
quoted; the best one is named, the others are not. Memory is not re-checked here (a lighter recompute or less
offload may not fit): the fix says so and points at pick_recompute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..engine.config import TrainingConfig
from ..engine.context import Context, build_context
from ..engine.findings import Finding, has_errors
from ..engine.rules import finding, run
from ..engine.step_time import StepTime, step_time
from ..errors import InputError
from .estimate_memory import ESTIMATE_FAMILIES
from .size_cp import comm_type_for

DOMINANT_SHARE = 0.25  # a term above this share of the step gets a finding
VPP_CHOICES = (2, 3, 4, 6, 8, 12)


def _rerun(ctx: Context, **changes: Any) -> tuple[StepTime, TrainingConfig] | None:
    """The step time of the configuration with ``changes``, or None when a rule refuses it."""
    data = ctx.cfg.model_dump(exclude_unset=True)
    data.update(changes)
    try:
        cfg = TrainingConfig(**{k: v for k, v in data.items() if v is not None or k in changes})
        alt = build_context(cfg)
    except (InputError, ValueError):
        return None
    if alt.split.split is None or alt.num_microbatches is None or has_errors(run(alt, ESTIMATE_FAMILIES)):
        return None
    return step_time(alt), cfg


def tokens_per_s(st: StepTime) -> float:
    return st.tokens_per_step / st.step_s


def _best(ctx: Context, options: list[tuple[str, dict[str, Any]]]) -> tuple[str, StepTime] | None:
    """The rule-checked alternative with the most tokens per second (a larger batch changes the step, not the job)."""
    found = []
    for label, changes in options:
        result = _rerun(ctx, **changes)
        if result is not None:
            found.append((tokens_per_s(result[0]), label, result[0]))
    if not found:
        return None
    _, label, st = max(found, key=lambda f: f[0])
    return label, st


def _cp_options(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    c = ctx.cfg
    comm, hierarchy, why = comm_type_for(ctx.model, ctx.gpu, c.tp, c.cp, c.packed_sequences)
    if comm is None or (comm == ctx.cp_comm_type and hierarchy == c.hierarchical_cp_sizes):
        return []
    label = f"cp_comm_type={comm}" + (f" with hierarchical_cp_sizes={hierarchy}" if hierarchy else "")
    return [(f"{label} ({why})", {"cp_comm_type": comm, "hierarchical_cp_sizes": hierarchy})]


def _ep_options(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    c, gpu = ctx.cfg, ctx.gpu
    out = []
    if not c.ep_overlap:
        out.append(
            (
                "ep_overlap=true (overlap the all-to-all with the other microbatch's compute)",
                {"ep_overlap": True},
            )
        )
    if c.dispatcher in ("alltoall", "allgather"):
        for backend in gpu.flex_backends:
            if backend in ("deepep", "hybridep"):
                out.append((f"dispatcher=flex-{backend} (one copy per remote node, NVLink forwarding)",
                            {"dispatcher": f"flex-{backend}", "moe_shared_expert_overlap": False}))  # fmt: skip
    return out


def _bubble_options(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    c = ctx.cfg
    out = []
    if ctx.gbs:
        out.append((f"gbs={2 * ctx.gbs} (twice the microbatches per step)", {"gbs": 2 * ctx.gbs}))
    if c.pipeline_layout is None:
        vpp = ctx.vpp or 1
        out += [
            (f"vpp={v} (interleaved 1F1B: the bubble shrinks by VPP)", {"vpp": v})
            for v in VPP_CHOICES
            if v > vpp
        ]
    return out


def _recompute_options(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    if ctx.cfg.recompute_granularity is None:
        return []
    return [("no recompute, if memory allows (pick_recompute finds the cheapest set that fits)",
             {"recompute_granularity": None, "recompute_modules": None, "recompute_method": None,
              "recompute_num_layers": None})]  # fmt: skip


def _offload_options(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    fraction = ctx.cfg.optimizer_cpu_offload_fraction
    if not fraction:
        return []
    out = [(f"optimizer_cpu_offload_fraction={f:g}, if memory allows", {"optimizer_cpu_offload_fraction": f})
           for f in (0.5, 0.0) if f < fraction]  # fmt: skip
    return out


# term -> (code, what it is, keys, options)
TERMS: dict[str, tuple[str, str, list[str], Callable[[Context], list[tuple[str, dict[str, Any]]]]]] = {
    "cp_comm": ("STEP_CP_COMM_DOMINANT", "Context-parallel communication", ["cp_comm_type", "hierarchical_cp_sizes"], _cp_options),
    "ep_comm": ("STEP_EP_COMM_DOMINANT", "The expert all-to-all", ["ep_overlap", "dispatcher"], _ep_options),
    "pipeline_bubble": ("STEP_BUBBLE_DOMINANT", "The pipeline bubble", ["gbs", "vpp"], _bubble_options),
    "recompute": ("STEP_RECOMPUTE_DOMINANT", "Activation recompute", ["recompute_granularity", "recompute_modules"], _recompute_options),
    "optimizer": ("STEP_OFFLOAD_DOMINANT", "The optimizer step on the CPU (optimizer offload)", ["optimizer_cpu_offload_fraction"], _offload_options),
}  # fmt: skip


def dominant_term_findings(ctx: Context, st: StepTime) -> list[Finding]:
    """One finding per term above DOMINANT_SHARE of the step, with the best rule-checked alternative."""
    out = []
    for term, (code, what, keys, options) in TERMS.items():
        seconds = st.terms.get(term, 0.0)
        share = seconds / st.step_s if st.step_s else 0.0
        if share <= DOMINANT_SHARE or (term == "optimizer" and not ctx.cfg.optimizer_cpu_offload_fraction):
            continue
        message = f"{what} takes {share:.0%} of the estimated step ({seconds:.2f} s of {st.step_s:.2f} s)."
        best = _best(ctx, options(ctx))
        if best is None:
            fix = (
                "No rule-checked setting of "
                + " or ".join(keys)
                + " cuts it here; see size_cp and plan_layout."
            )
        else:
            label, alt = best
            fix = (
                f"Set {label}: estimated {tokens_per_s(alt) / tokens_per_s(st):.2f}x the tokens/s "
                f"({alt.tflops_per_gpu:.0f} TFLOP/s per GPU, step {alt.step_s:.2f} s, "
                f"{alt.terms.get(term, 0.0) / alt.step_s:.0%} {term})."
            )
        out.append(finding(code, message, fix, keys))
    return out
