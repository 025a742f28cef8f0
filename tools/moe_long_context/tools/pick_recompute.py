"""pick_recompute: the real Megatron recompute setting with the least recompute time that fits the GPU with a
headroom margin (default 5 % of usable HBM).

Cost is the step-time model's recompute term (what each Megatron Core 0.19 label replays). Each applicable
label is measured alone per PP rank (never ``core_attn``: it replays attention and frees almost nothing with
fused attention); label sets are ranked by summed cost and the cheapest whose estimate fits is confirmed in
full. Full recompute comes last (block before uniform, ``full_iteration`` graphs when per-layer graphs are
on). Every candidate runs through the engine's checks; one that adds an error is skipped. The result names
the next cheaper and the next safer set; when nothing fits, the next steps with the GiB each buys.
"""

from __future__ import annotations

import itertools
import math
from functools import cached_property
from typing import Any

from pydantic import BaseModel, Field

from ..engine.config import (
    RECOMPUTE_MODULES,
    LoraRequestArgs,
    TrainingConfig,
    TrainingRequestArgs,
    lora_config,
    precision_is_quantized,
)
from ..engine.context import Context, build_context
from ..engine.findings import Finding, Judged, errors, has_errors, sort_findings
from ..engine.rules import finding, run
from ..engine.rules.recompute import unused_modules
from ..engine.rules.upstream import coverage
from ..engine.step_time import step_time
from ..errors import InputError
from ..memory.rank_memory import memory_model
from ..memory.terms import GIB
from .estimate_memory import memory_findings, require_seq_len
from .recompute_next_steps import NextStep, next_steps

PICK_FAMILIES = (
    "recompute",
    "graphs",
    "moe",
    "precision",
    "optimizer",
    "layout",
    "pipeline",
    "batch",
    "sequence",
    "cp",
)

# Cheapest recompute first: output-discarding checkpoints replay an elementwise op or two small GEMMs;
# mlp and shared_experts replay a whole (shared) MLP; moe replays routing, both all-to-alls and the experts.
PREFERENCE = ("layernorm", "moe_act", "mla_up_proj", "gdn_norm_out", "mlp", "shared_experts", "moe")
MIN_SAVING = 2**20  # a label that frees less than 1 MiB on the peak rank is not worth its recompute

RECOMPUTE_KEYS = ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers")
CLEARED = dict.fromkeys(RECOMPUTE_KEYS)


class PickRecomputeRequest(LoraRequestArgs, TrainingRequestArgs):
    """A complete training configuration (seq_len and gpu required); its recompute fields are replaced."""

    headroom: float = Field(
        allow_inf_nan=False,
        default=0.05,
        ge=0.0,
        le=0.5,
        description="Share of usable HBM the choice must leave free (0.05 = 5 %).",
    )


class Alternative(BaseModel):
    kind: str = Field(description="cheaper (less recompute time, over the budget) or safer (lower peak).")
    recompute_granularity: str | None = Field(description="selective or full.")
    recompute_modules: list[str] = Field(description="The selective labels of this alternative.")
    recompute_method: str | None = Field(description="uniform or block for full recompute.")
    recompute_num_layers: int | None = Field(description="Layers per recompute group (full recompute).")
    peak_gib: float = Field(description="Estimated peak with it, GiB.")
    fits: bool = Field(description="Whether it fits the usable memory less the headroom.")
    recompute_s: float = Field(description="Seconds per step its recompute adds (step-time model).")


class LabelGain(BaseModel):
    label: str = Field(description="The recompute label (or 'full: <method> x <n>') added at this step.")
    gib_saved: float = Field(description="GiB this step removed from the peak rank.")
    peak_gib: float = Field(description="Peak after this step.")


class PickRecomputeResult(Judged):
    valid: bool = Field(
        description="True when no finding is an error (Megatron would accept the configuration)."
    )
    fits: bool = Field(description="The chosen setting's estimated peak fits the GPU with the headroom.")
    recompute_granularity: str | None = Field(description="selective, full, or None (no recompute needed).")
    recompute_modules: list[str] = Field(description="Megatron Core 0.19 labels for selective recompute.")
    recompute_method: str | None = Field(description="uniform or block for full recompute.")
    recompute_num_layers: int | None = Field(description="Layers per recompute group (full recompute).")
    other_settings: dict[str, Any] = Field(
        description="Other fields the choice needs (full_iteration graphs)."
    )
    peak_gib_before: float | None = Field(description="Estimated peak of the configuration as given, GiB.")
    peak_gib_after: float | None = Field(description="Estimated peak with the chosen recompute, GiB.")
    usable_gib: float = Field(description="Memory PyTorch can allocate on the GPU, GiB.")
    gains: list[LabelGain] = Field(description="What each chosen label bought, in the order they were added.")
    bridge_overrides: list[str] = Field(description="Megatron-Bridge ConfigContainer keys to set.")
    megatron_lm_flags: list[str] = Field(description="The same as Megatron-LM pretrain_gpt.py flags.")
    next_steps: list[NextStep] = Field(
        description="When nothing fits: what to change next, in order, with the GiB each buys."
    )
    headroom: float = Field(description="Share of usable HBM the choice leaves free.")
    budget_gib: float = Field(description="usable_gib x (1 - headroom): what the peak must stay under.")
    recompute_s: float | None = Field(
        description="Seconds per step the chosen recompute adds (step-time model)."
    )
    alternatives: list[Alternative] = Field(description="The next cheaper label set and the next safer one.")
    findings: list[Finding]


# --------------------------------------------------------------------------- candidates


class Trial:
    """One candidate configuration: its context, estimated peak (bytes) and whether Megatron accepts it (the
    rules and the memory model run when first asked for)."""

    def __init__(self, base: dict[str, Any], changes: dict[str, Any], model, gpu, baseline_errors: set[str]):
        self.changes, self.baseline_errors = changes, baseline_errors
        self.cfg = TrainingConfig(**{**base, **changes})
        self.ctx = Context(cfg=self.cfg, model=model, gpu=gpu)

    @cached_property
    def new_errors(self) -> list[Finding]:
        return [f for f in errors(run(self.ctx, PICK_FAMILIES)) if f.code not in self.baseline_errors]

    @cached_property
    def rank_totals(self) -> list[float]:
        mm = memory_model(self.ctx) if not self.new_errors else None
        return [r.total for r in mm.ranks] if mm is not None else []

    @property
    def peak(self) -> float:
        return max(self.rank_totals, default=math.inf)

    @property
    def accepted(self) -> bool:
        return not self.new_errors

    @cached_property
    def recompute_s(self) -> float:
        """Seconds per step its recompute adds (the step-time model's recompute term)."""
        return step_time(self.ctx).terms.get("recompute", 0.0)


def _selective(labels: list[str]) -> dict[str, Any]:
    return {**CLEARED, "recompute_granularity": "selective", "recompute_modules": list(labels)}


def _applicable(ctx: Context) -> list[str]:
    m = ctx.model
    has = {
        "layernorm": m.is_mla or m.is_moe,  # the only norms not fused into a GEMM (MLA input, MoE pre-MLP)
        "moe_act": m.is_moe,
        # DSA's absorbed MLA refuses to checkpoint its up-projection under FP8/FP4 (rules/dsa.py)
        "mla_up_proj": m.is_mla and not (m.has_dsa and precision_is_quantized(ctx.cfg.precision)),
        "gdn_norm_out": m.has_linear_attention,
        "mlp": not m.all_layers_moe,
        "shared_experts": bool(m.moe_shared_expert_intermediate_size),
        "moe": m.is_moe,
    }
    return [label for label in PREFERENCE if has[label]]


def _graph_changes(ctx: Context) -> dict[str, Any]:
    """Full recompute with per-layer CUDA graphs needs full-iteration graphs (and no NaN check)."""
    if ctx.cfg.cuda_graph_impl in ("local", "transformer_engine"):
        return {
            "cuda_graph_impl": "full_iteration",
            "cuda_graph_modules": None,
            "check_for_nan_in_loss": False,
        }
    return {}


def _skip_finding(what: str, trial: Trial) -> Finding:
    codes = sorted({f.code for f in trial.new_errors})
    return finding(
        "RECOMPUTE_PICK_SKIPPED",
        f"Left out {what}: Megatron refuses it here ({', '.join(codes)}).",
        trial.new_errors[0].fix,
        ["recompute_modules", "recompute_granularity"],
    )


DEFAULT_HEADROOM = 0.05  # share of usable HBM a choice leaves free (allocator growth, NCCL, fragmentation)
MAX_VERIFIED = 6  # label sets tried in full, cheapest first, before the search falls back to all labels


class Picker:
    def __init__(self, ctx: Context, headroom: float = DEFAULT_HEADROOM, report: bool = True):
        self.ctx = ctx
        self.report = report  # measure what each chosen label buys (for the tool's report)
        self.usable = ctx.gpu.usable_hbm_gib * GIB
        self.budget = self.usable * (1 - headroom)
        self.base = ctx.cfg.model_dump(exclude_unset=True)
        cleared = {**self.base, **CLEARED}
        self.baseline_errors = {
            f.code for f in errors(run(Context(TrainingConfig(**cleared), ctx.model, ctx.gpu), PICK_FAMILIES))
        }
        self.findings: list[Finding] = []
        self.gains: list[LabelGain] = []
        self.sets: list[tuple[float, float, tuple[str, ...]]] = []  # (cost s, estimated peak, labels)
        self.tried: dict[str, Trial] = {}  # by the changes: the same changes make the same trial

    def trial(self, changes: dict[str, Any]) -> Trial:
        key = repr(sorted(changes.items()))
        if key not in self.tried:
            self.tried[key] = Trial(self.base, changes, self.ctx.model, self.ctx.gpu, self.baseline_errors)
        return self.tried[key]

    def fits(self, trial: Trial) -> bool:
        return trial.accepted and trial.peak <= self.budget

    def _gain(self, label: str, before: float, trial: Trial) -> None:
        self.gains.append(
            LabelGain(
                label=label,
                gib_saved=round((before - trial.peak) / GIB, 3),
                peak_gib=round(trial.peak / GIB, 3),
            )
        )

    def labels_trial(self, labels: tuple[str, ...]) -> Trial:
        return self.trial(_selective(list(labels)) if labels else dict(CLEARED))

    def cost(self, trial: Trial) -> float:
        """Seconds per step the recompute of ``trial`` adds (the step-time model's recompute term)."""
        return trial.recompute_s

    def selective(self, start: Trial) -> Trial:
        """The cheapest set of labels (by the step time's recompute term) whose peak fits the budget.

        Each label's saving and cost are measured alone; sets are ranked by their summed cost, the sets whose
        summed saving reaches the budget are tried in full cheapest first (savings are not exactly additive).
        When none fits, every label together is the most memory-saving selective setting."""
        saving: dict[str, list[float]] = {}  # per PP rank: the peak moves between ranks as labels are added
        cost: dict[str, float] = {}
        for label in _applicable(self.ctx):
            trial = self.labels_trial((label,))
            if not trial.accepted:
                self.findings.append(_skip_finding(f"recompute module {label!r}", trial))
                continue
            per_rank = [a - b for a, b in zip(start.rank_totals, trial.rank_totals, strict=True)]
            if max(per_rank, default=0.0) >= MIN_SAVING:
                saving[label], cost[label] = per_rank, self.cost(trial)
        order = [x for x in PREFERENCE if x in saving]
        self.sets = []
        for n in range(1, len(order) + 1):
            for combo in itertools.combinations(order, n):
                if "moe" in combo and ({"moe_act", "shared_experts"} & set(combo)):
                    continue  # moe replays the whole block: these add nothing
                est = max(
                    total - sum(saving[x][r] for x in combo) for r, total in enumerate(start.rank_totals)
                )
                self.sets.append((sum(cost[x] for x in combo), est, combo))
        self.sets.sort()
        best: Trial | None = None
        for _, _, combo in [x for x in self.sets if x[1] <= self.budget][:MAX_VERIFIED]:
            trial = self.labels_trial(combo)
            if self.fits(trial):
                best = trial
                break
        if best is None:
            best = self.labels_trial(tuple(order)) if order else start
        if not self.report:
            return best
        chosen = [x for x in PREFERENCE if x in set(best.cfg.recompute_modules or [])]
        previous = start
        for i in range(len(chosen)):
            trial = self.labels_trial(tuple(chosen[: i + 1]))
            self._gain(chosen[i], previous.peak, trial)
            previous = trial
        return best

    def alternatives(self, best: Trial) -> list[Alternative]:
        """The next cheaper label set (it does not fit the budget, or it would have been chosen) and the next
        safer one (the cheapest that leaves a lower peak), each measured in full."""
        if best.cfg.recompute_granularity != "selective" or not self.sets:
            return []
        labels = tuple(x for x in PREFERENCE if x in set(best.cfg.recompute_modules or []))
        chosen_cost = self.cost(best)
        out = []
        cheaper = [x for x in self.sets if x[0] < chosen_cost and x[2] != labels]
        if cheaper:
            combo = min(cheaper, key=lambda x: x[1])[2]  # of the cheaper sets, the one saving the most
            out.append(self._alternative("cheaper", self.labels_trial(combo)))
        for _, _, combo in sorted((x for x in self.sets if x[2] != labels), key=lambda x: x[0]):
            trial = self.labels_trial(combo)  # its cost first: a cheaper set needs no memory model
            if self.cost(trial) >= chosen_cost and trial.accepted and trial.peak < best.peak - MIN_SAVING:
                out.append(self._alternative("safer", trial))
                break
        else:  # no selective set leaves less: full recompute is the safer choice
            full = self.full_trial("uniform", 1)
            if full.accepted and full.peak < best.peak - MIN_SAVING:
                out.append(self._alternative("safer", full))
        return out

    def _alternative(self, kind: str, trial: Trial) -> Alternative:
        c = trial.cfg
        return Alternative(
            kind=kind,
            recompute_granularity=c.recompute_granularity,
            recompute_modules=list(c.recompute_modules or [])
            if c.recompute_granularity == "selective"
            else [],
            recompute_method=c.recompute_method,
            recompute_num_layers=c.recompute_num_layers,
            peak_gib=round(trial.peak / GIB, 3),
            fits=self.fits(trial),
            recompute_s=round(self.cost(trial), 4),
        )

    def full_trial(self, method: str, layers: int) -> Trial:
        return self.trial(
            {
                **CLEARED,
                "recompute_granularity": "full",
                "recompute_method": method,
                "recompute_num_layers": layers,
                **_graph_changes(self.ctx),
            }
        )

    def full(self, best: Trial) -> Trial | None:
        """Full recompute, last resort: uniform x 1 (every layer keeps only its input) if it is accepted and
        fits, then the block setting recomputing the fewest layers per chunk that still fits."""
        uniform = self.full_trial("uniform", 1)
        if not uniform.accepted:
            self.findings.append(_skip_finding("full recompute", uniform))
            return None
        chosen = uniform
        if self.fits(uniform):
            split = self.ctx.split.split
            low, high = 1, max(s.decoders for row in split.stages for s in row) - 1
            while low <= high:  # fewer block layers keep more activations: find the smallest that fits
                mid = (low + high) // 2
                trial = self.full_trial("block", mid)
                if self.fits(trial):
                    chosen, high = trial, mid - 1
                else:
                    low = mid + 1
        if chosen.peak < best.peak:
            self._gain(
                f"full: {chosen.cfg.recompute_method} x {chosen.cfg.recompute_num_layers}", best.peak, chosen
            )
        return chosen

    def pick(self) -> Trial:
        """No recompute if that fits; else the cheapest selective labels; else full recompute if it is lower."""
        best = self.trial(dict(CLEARED))
        if not self.fits(best):
            best = self.selective(best)
            if not self.fits(best):
                full = self.full(best)
                if full is not None and full.peak < best.peak:
                    best = full
        return best


# --------------------------------------------------------------------------- overrides


def overrides(
    granularity: str | None, modules: list[str], method: str | None, layers: int | None, other: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """Megatron-Bridge keys and Megatron-LM flags for a recompute choice."""
    if granularity is None:
        return ["model.recompute_granularity=null", "model.recompute_modules=null"], []
    bridge = [f"model.recompute_granularity={granularity}"]
    flags = [f"--recompute-granularity {granularity}"]
    if granularity == "selective":
        bridge.append(f"model.recompute_modules=[{','.join(modules)}]")
        flags.append("--recompute-modules " + " ".join(modules))
    else:
        bridge += [f"model.recompute_method={method}", f"model.recompute_num_layers={layers}"]
        flags += [f"--recompute-method {method}", f"--recompute-num-layers {layers}"]
    if other.get("cuda_graph_impl") == "full_iteration":
        bridge += [
            "model.cuda_graph_impl=full_iteration",
            "model.cuda_graph_modules=[]",
            "rerun_state_machine.check_for_nan_in_loss=false",
        ]
        flags += ["--cuda-graph-impl full_iteration", "--no-check-for-nan-in-loss-and-grad"]
    return bridge, flags


# --------------------------------------------------------------------------- the tool


def pick_recompute(req: PickRecomputeRequest) -> PickRecomputeResult:
    result = _pick_recompute(req)
    return result.model_copy(update={"not_checked": [*req.lora_not_checked(), *result.not_checked]})


def _pick_recompute(req: PickRecomputeRequest) -> PickRecomputeResult:
    cfg = TrainingConfig(**lora_config(req.model_dump(exclude_unset=True, exclude={"headroom"})))
    require_seq_len(cfg)
    if cfg.gpu is None:
        raise InputError("gpu", None, "a GPU catalog id (h100, h200, b200, b300, gb200, gb300): pick_recompute "
                         "needs the usable memory")  # fmt: skip
    ctx = build_context(cfg)
    given = memory_model(ctx)
    usable = ctx.gpu.usable_hbm_gib
    margin = dict(headroom=req.headroom, budget_gib=round(usable * (1 - req.headroom), 3))
    if given is None:
        found = sort_findings([*run(ctx, PICK_FAMILIES), *memory_findings(ctx, None)])
        none = ("recompute_granularity", "recompute_method", "recompute_num_layers", "peak_gib_before", "peak_gib_after",
                "recompute_s")  # fmt: skip
        empty = (
            "recompute_modules",
            "gains",
            "bridge_overrides",
            "megatron_lm_flags",
            "next_steps",
            "alternatives",
        )
        return PickRecomputeResult(
            valid=not has_errors(found), fits=False, other_settings={}, usable_gib=usable, **margin, findings=found,
            **dict.fromkeys(none), **{k: [] for k in empty}, **coverage(cfg, ctx.model),
        )  # fmt: skip
    picker = Picker(ctx, req.headroom)
    if set(cfg.recompute_modules or ()) - set(RECOMPUTE_MODULES):  # a label Megatron refuses: say so
        picker.findings.append(
            unused_modules(
                cfg.recompute_modules,
                "as given: pick_recompute replaces the recompute fields with its choice",
                "Use the labels of the choice (recompute_modules in this result).",
            )
        )
    best = picker.pick()
    steps = [] if picker.fits(best) else next_steps(picker, best)
    if not picker.fits(best):
        picker.findings.append(
            finding(
                "RECOMPUTE_PICK_NO_FIT",
                f"Even the most memory-saving recompute Megatron accepts here leaves {best.peak / GIB:.1f} GiB "
                f"on the peak rank, above the {margin['budget_gib']:g} GiB budget ({usable:g} GiB of "
                f"{ctx.gpu.name} less {req.headroom:.0%} headroom).",
                "Apply the next steps in order: "
                + "; ".join(f"{s.action} ({s.gib_saved:+.1f} GiB)" for s in steps)
                if steps
                else "Use more GPUs or a GPU with more memory.",
                ["recompute_granularity", "optimizer_cpu_offload_fraction", "cp", "tp", "pp", "mbs"],
            )
        )
    c = best.cfg
    other = {k: v for k, v in best.changes.items() if k not in RECOMPUTE_KEYS}
    bridge, flags = overrides(
        c.recompute_granularity,
        list(c.recompute_modules or []),
        c.recompute_method,
        c.recompute_num_layers,
        other,
    )
    findings = sort_findings(run(best.ctx, PICK_FAMILIES) + picker.findings)
    return PickRecomputeResult(
        valid=not has_errors(findings),
        fits=picker.fits(best),
        recompute_granularity=c.recompute_granularity,
        recompute_modules=list(c.recompute_modules or []) if c.recompute_granularity == "selective" else [],
        recompute_method=c.recompute_method,
        recompute_num_layers=c.recompute_num_layers,
        other_settings=other,
        peak_gib_before=round(given.peak_rank.total / GIB, 3),
        peak_gib_after=round(best.peak / GIB, 3),
        usable_gib=usable,
        gains=picker.gains,
        bridge_overrides=bridge,
        megatron_lm_flags=flags,
        next_steps=steps,
        alternatives=picker.alternatives(best) if picker.fits(best) else [],
        recompute_s=round(picker.cost(best), 4),
        **margin,
        findings=findings,
        **coverage(best.cfg, ctx.model),
    )
