"""The comparison of plan_layout's plans with the published layout for the same job (engine/layouts.yaml)."""

from __future__ import annotations

from typing import Any

from ..engine.config import TrainingConfig
from ..engine.context import Context
from ..engine.findings import has_errors
from ..engine.rules import run
from ..engine.step_time import step_time
from ..memory.rank_memory import memory_model
from ..memory.terms import GIB
from ..model.catalog import load_model
from ..model.specs import GpuSpec, ModelSpec
from .plan_evaluate import Evaluated
from .plan_models import PlanLayoutRequest, ReferenceComparison
from .plan_search import _vpp_from_layout, required_settings, seconds_per_token


def published_for(model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest) -> list[Any]:
    """Published layouts (engine/layouts.yaml) for this exact job: model, GPU, GPU count and length. They are
    full-training runs, so a LoRA job has none."""
    from ..engine.representative import representative_layouts

    if req.lora_dim is not None:
        return []
    job = (model.id, gpu.id, req.num_gpus, req.seq_len)
    return [
        layout
        for layout in representative_layouts()
        if (load_model(layout.config["model"]).id, layout.config["gpu"], layout.config["num_gpus"],
            layout.config["seq_len"]) == job
    ]  # fmt: skip


# Settings of a published run's data rather than its layout (offline-packed SFT): left out when it is compared.
DATA_FORMAT = ("packed_sequences", "pad_to_max_length", "pad_cu_seqlens", "variable_seq_lengths")


def _references(
    model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, gbs: int
) -> list[tuple[Any, Evaluated | None]]:
    """Published layouts for this exact job at the plans' global batch, evaluated like a plan (their own
    recompute and offload)."""
    out = []
    for layout in published_for(model, gpu, req):
        c = {**layout.config, "gbs": gbs, "launcher": req.launcher}
        notes = [f"published layout: {layout.title}"]
        packed = [k for k in DATA_FORMAT if c.pop(k, None)]
        if packed:  # the plans train the request's unpacked sequences: compare the layout on the same job
            notes.append(
                f"published layout without its SFT data format ({', '.join(packed)}), as the plans run"
            )
        c.update(required_settings(model))
        if req.overhead_gib is not None:
            c["overhead_gib"] = req.overhead_gib
        # the TE loss kernel is a Bridge recipe choice Megatron-LM refuses (LM_CROSS_ENTROPY_TE)
        if req.launcher == "megatron-lm" and c.get("cross_entropy_fusion") == "te":
            c["cross_entropy_fusion"] = "native"
        out.append((layout, _evaluate(c, model, gpu, notes)))
    return out


def _evaluate(c: dict, model: ModelSpec, gpu: GpuSpec, notes: list[str]) -> Evaluated | None:
    cfg = TrainingConfig(**_vpp_from_layout(c))
    ctx = Context(cfg=cfg, model=model, gpu=gpu)
    found = run(ctx)
    if has_errors(found):
        return None
    return Evaluated(cfg, ctx, memory_model(ctx).peak_rank.total, step_time(ctx), found, notes)


def as_plan(ref: Evaluated, model: ModelSpec, gpu: GpuSpec) -> Evaluated | None:
    """A published layout as a plan: every plan is written for both launchers, and Megatron-LM refuses the TE
    loss kernel of Bridge's recipes (LM_CROSS_ENTROPY_TE), so the plan keeps the native fused loss (its FP32
    logits re-evaluated for memory and time)."""
    if ref.cfg.cross_entropy_fusion != "te":
        return ref
    c = {**ref.cfg.model_dump(exclude_defaults=True), "cross_entropy_fusion": "native"}
    note = "the native fused loss, not the recipe's TE kernel: Megatron-LM refuses it (LM_CROSS_ENTROPY_TE)"
    return _evaluate(c, model, gpu, [*ref.notes, note])


def _same_plan(a: Evaluated, b: Evaluated) -> bool:
    keys = ("tp", "cp", "pp", "ep", "etp", "mbs", "recompute_granularity", "recompute_modules")
    return all(getattr(a.cfg, k) == getattr(b.cfg, k) for k in keys) and a.ctx.vpp == b.ctx.vpp


def _compare(
    layout, e: Evaluated | None, found: list[Evaluated], rank: int | None, budget: float
) -> ReferenceComparison:
    base = dict(id=layout.id, title=layout.title, source=layout.source)
    if e is None:
        return ReferenceComparison(**base, layout="-", settings={}, valid=False, fits=False, peak_gib=None, tflops_per_gpu=None,
                                   tokens_per_s=None, rank=None, verdict="the engine reports an error for this layout")  # fmt: skip
    fits = e.peak <= budget
    rank = rank if fits else None
    top = found[0] if found else None
    if not fits:
        verdict = (
            f"estimated {e.peak / GIB:.1f} GiB per GPU, above the {budget / GIB:.1f} GiB budget "
            f"({e.ctx.gpu.usable_hbm_gib:g} GiB usable less the headroom)"
        )
    elif top is None:
        verdict = "no plan of this request (dispatcher, precision) to compare it with"
    elif top is e or seconds_per_token(e.step) <= seconds_per_token(top.step):
        verdict = "the published layout is the fastest plan found"
    else:
        gain = seconds_per_token(e.step) / seconds_per_token(top.step) - 1
        per_m = {  # seconds per million tokens, by term, so that steps of different batch sizes compare
            name: {k: v / ev.step.tokens_per_step * 1e6 for k, v in ev.step.terms.items()}
            for name, ev in (("ref", e), ("top", top))
        }
        diffs = sorted(
            ((k, per_m["ref"].get(k, 0.0), per_m["top"].get(k, 0.0)) for k in {*per_m["ref"], *per_m["top"]}),
            key=lambda t: t[2] - t[1],
        )
        slower = "; ".join(f"{k} {a:.2f} s vs {b:.2f} s" for k, a, b in diffs[:3] if a > b)
        verdict = (
            f"the top plan ({top.ctx.layout.describe()}) is estimated {gain:.0%} faster per token; per million "
            f"tokens the published layout spends more on {slower or 'no single term'}"
        )
    return ReferenceComparison(
        **base,
        layout=e.ctx.layout.describe(),
        settings=e.cfg.model_dump(mode="json", exclude_defaults=True),
        valid=not has_errors(e.findings),
        fits=fits,
        peak_gib=round(e.peak / GIB, 2),
        tflops_per_gpu=round(e.step.tflops_per_gpu, 1),
        tokens_per_s=round(e.step.tokens_per_step / e.step.step_s, 1),
        rank=rank,
        verdict=verdict,
    )
