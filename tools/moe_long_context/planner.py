"""plan_layout: from (model, GPU, GPU count, sequence length, global batch) to ranked, complete plans.

1. Enumerate TP, CP, PP, VPP, EP and MBS that factor the world under MoE parallel folding, with a pipeline
   split Megatron accepts for each (PP, VPP), and CP that the sequence and the attention type allow.
2. Rank the candidates by an optimistic bound (compute only) and evaluate them best-first: every rule
   family of the engine, memory with pick_recompute (selective before full) and optimizer CPU offload
   when nothing else fits, then the step-time model with the recompute it costs.
3. Stop when the next candidate's bound cannot beat the N-th plan found (branch and bound).
Every plan returned passes the engine's rules with no error and fits its GPU's memory.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

from .catalog import load_gpu, load_model
from .config import MAX_GPUS, MAX_SEQ_LEN, Dispatcher, Precision, TrainingConfig, _Args
from .context import Context
from .cp import _constraint_problems, comm_type_for, powers_of_two
from .errors import InputError
from .estimate import breakdown
from .findings import Finding, has_errors, sort_findings
from .memory import memory_model
from .memory_terms import GIB
from .overrides import bridge_override_list, bridge_python_snippet, megatron_args_for
from .params import attention_params, mlp_params, model_params, spec_cache
from .perf import ASSUMPTIONS as PERF_ASSUMPTIONS
from .perf import step_time
from .pipeline import propose_splits
from .recompute_picker import Picker
from .rules import run
from .rules.cp import shard_target
from .specs import GpuSpec, ModelSpec

MAX_EVALUATED = 24  # full evaluations (rules + memory + recompute + time) per request at most


class PlanLayoutRequest(_Args):
    model: str | dict[str, Any] = Field(description="Catalog model id or a Hugging Face config.json object.")
    gpu: str = Field(description="GPU catalog id: h100, h200, b200, b300, gb200, gb300.")
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs in the job.")
    seq_len: int = Field(ge=256, le=MAX_SEQ_LEN, description="Training sequence length in tokens.")
    gbs: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQ_LEN,
        description="Global batch size. Unset: each plan uses 8 x PP microbatches per step (a multiple of PP).",
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
        default=None,
        ge=0.0,
        le=1024.0,
        description="GiB each GPU keeps outside allocated tensors (CUDA context, NCCL, fragmentation); every "
        "plan must fit with it. Unset: the memory model's default. Raise it to plan with more headroom.",
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
    megatron_args: list[str] = Field(description="Megatron-LM flags (architecture flags not included).")
    bridge_overrides: list[str] = Field(description="Megatron Bridge key=value overrides.")
    bridge_snippet: str = Field(
        description="Python applying the overrides to a Bridge recipe's ConfigContainer."
    )
    findings: list[Finding] = Field(description="Warnings and info the engine reports on this plan.")


class ReferenceComparison(BaseModel):
    """A published layout (data/layouts.yaml) for the same job, and how the plans compare with it."""

    id: str
    title: str
    source: str
    layout: str
    valid: bool = Field(description="No error finding from the engine's rules.")
    fits: bool = Field(description="The memory model estimates it fits the GPU.")
    peak_gib: float | None
    tflops_per_gpu: float | None
    rank: int | None = Field(
        description="Its place among the feasible plans (1 = fastest); None if infeasible."
    )
    verdict: str = Field(description="Why the top plan is (or is not) preferred, by the step-time terms.")


class PlanLayoutResult(BaseModel):
    def render_text(self) -> str:
        """A compact summary for people: one line per plan, then each plan's reasons and overrides."""
        lines = [
            f"{self.candidates} candidates, {self.evaluated} evaluated in full, {self.feasible} feasible",
            "",
        ]
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
                f"{p.throughput.tflops_per_gpu:.0f} TFLOP/s/GPU  MFU {p.throughput.mfu:.1%}"
            )
        for ref in self.references:
            lines += ["", f"published: {ref.title} ({ref.layout}): {ref.tflops_per_gpu} TFLOP/s/GPU, "
                      f"{'rank ' + str(ref.rank) if ref.rank else 'not feasible'}; {ref.verdict}"]  # fmt: skip
        for p in self.plans:
            lines += ["", f"#{p.rank} {p.layout}", *(f"  - {w}" for w in p.why), "  Bridge overrides:"]
            lines += [f"    {o}" for o in p.bridge_overrides]
        return "\n".join(lines)

    plans: list[Plan]
    references: list[ReferenceComparison] = Field(
        description="Published layouts for this model, GPU, GPU count and sequence length, evaluated the same way."
    )
    candidates: int = Field(description="Layouts that factor the world and split the layers.")
    evaluated: int = Field(description="Candidates evaluated in full (rules, memory, recompute, time).")
    feasible: int = Field(description="Evaluated candidates that pass every rule and fit memory.")
    assumptions: list[str]
    findings: list[Finding]


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    tp: int
    cp: int
    pp: int
    vpp: int | None
    ep: int
    mbs: int
    split: tuple[tuple[str, Any], ...]  # pipeline split settings
    bound_s: float  # optimistic seconds per token per GPU (lower is better)


def default_precision(gpu: GpuSpec) -> str:
    for recipe in ("mxfp8", "fp8-blockwise", "fp8-tensorwise"):
        if recipe in gpu.quant_recipes:
            return recipe
    return "bf16"


def default_dispatcher(gpu: GpuSpec) -> str:
    if gpu.is_nvl72 and "hybridep" in gpu.flex_backends:
        return "flex-hybridep"
    if "deepep" in gpu.flex_backends:
        return "flex-deepep"
    return "alltoall"


def _tp_options(model: ModelSpec, gpu: GpuSpec) -> list[int]:
    out = []
    for tp in powers_of_two(min(8, gpu.nvlink_domain)):
        g = model.num_query_groups
        if model.num_attention_heads % tp == 0 and (g % tp == 0 or tp % g == 0):
            out.append(tp)
    return out


def _split_options(model: ModelSpec, pp: int, mtp: int, cache: dict) -> list[tuple[int | None, dict]]:
    """(VPP, split settings) pairs that split the layers over PP (VPP 1, 2, 4, ...)."""
    if pp == 1:
        return [(None, {})]
    key = (pp, mtp)
    if key not in cache:
        options = []
        per_rank = model.num_layers // pp
        for vpp in [None, *(v for v in (2, 3, 4, 6, 8, 12) if v <= per_rank)]:
            proposals = propose_splits(model.num_layers, pp, vpp, mtp, limit=1)
            if proposals:
                options.append((vpp, dict(proposals[0].settings)))
        cache[key] = options
    return cache[key]


def enumerate_candidates(model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, mtp: int) -> list[Candidate]:
    """Layouts that factor the world, split the layers, suit the sequence, and could hold their weights."""
    world, seq = req.num_gpus, req.seq_len
    split_cache: dict = {}
    experts = [e for e in powers_of_two(min(model.num_experts, world)) if model.num_experts % e == 0]
    totals = model_params(model)
    dense_params = totals.total - totals.experts + totals.mtp
    usable = gpu.usable_hbm_gib * GIB
    target = shard_target(gpu)
    out: list[Candidate] = []
    for tp in _tp_options(model, gpu):
        for cp in powers_of_two(world // tp):
            shard = seq // (tp * cp)
            if cp > 1 and not target // 8 <= shard <= target * 4:
                continue  # far from the shard target: communication-bound or activation-bound
            if _constraint_problems(model, seq, tp, cp, tp > 1, False, world):
                continue
            for pp in (p for p in powers_of_two(world // (tp * cp)) if p <= max(1, model.num_layers // 2)):
                if world % (tp * cp * pp):
                    continue
                splits = _split_options(model, pp, mtp, split_cache)
                for ep in experts:
                    if world % (ep * pp) or ep * pp > world:
                        continue
                    # BF16 weights alone (a lower bound of any plan's memory) must leave room
                    if 2 * (dense_params / (tp * pp) + totals.experts / (ep * pp)) > 0.8 * usable:
                        continue
                    for mbs in (1, 2) if seq <= 8192 else (1,):
                        for vpp, settings in splits:
                            out.append(
                                Candidate(tp, cp, pp, vpp, ep, mbs, tuple(sorted(settings.items())), 0.0)
                            )
    return out


def _settings(cand: Candidate, model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, base: dict) -> dict:
    """The engine fields of a candidate before recompute and offload are chosen."""
    dp = req.num_gpus // (cand.tp * cand.cp * cand.pp)
    comm, hierarchy, _ = comm_type_for(model, gpu, cand.tp, cand.cp)
    settings = {
        **base,
        "tp": cand.tp,
        "cp": cand.cp,
        "pp": cand.pp,
        "vpp": cand.vpp,
        "ep": cand.ep,
        "etp": 1,
        "mbs": cand.mbs,
        "gbs": _gbs(req, dp, cand.mbs, cand.pp, cand.vpp),
        "sequence_parallel": cand.tp > 1,
        "cp_comm_type": comm,
        "hierarchical_cp_sizes": hierarchy,
        **dict(cand.split),
    }
    if settings["dispatcher"].startswith("flex-") and cand.ep == 1:
        settings["dispatcher"] = "alltoall"
    return _vpp_from_layout(settings)


def _vpp_from_layout(settings: dict) -> dict:
    """Leave VPP to the layout string when there is one: Megatron Core derives it from the layout, and
    Megatron-LM refuses an explicit --num-virtual-stages-per-pipeline-rank next to a layout."""
    return {**settings, "vpp": None} if settings.get("pipeline_layout") else settings


@dataclass(frozen=True)
class MemoryForecast:
    """A quick forecast of the first PP rank's memory (the busiest in 1F1B) under each recompute level."""

    static: float  # weights, gradients, optimizer states on the GPU, overhead
    static_offloaded: float  # the same with the whole optimizer state on the CPU
    none: float  # activations without recompute
    selective: float  # with every applicable selective label
    full: float  # with full recompute (layer inputs plus one layer's activations)


Kind = tuple[str, bool]  # (attention type, MoE?) of a decoder layer: layers of a kind save the same tensors


def _chunk_kinds(model: ModelSpec, split) -> tuple[tuple[tuple[tuple[Kind, int], ...], ...], ...]:
    """Per rank and virtual stage: how many layers of each kind it holds (MTP layers count as the last
    layer's kind). Cached per split, which many candidates share."""
    cache = spec_cache(model)
    key = ("chunk_kinds", split)
    if key not in cache:
        index = 0
        per_rank: list[list[tuple]] = [[] for _ in range(split.pp)]
        for v in range(split.vpp):
            for r in range(split.pp):
                stage = split.stages[r][v]
                counts: dict[Kind, int] = {}
                layers = [*range(index, index + stage.decoders), *([model.num_layers - 1] * stage.mtp)]
                for i in layers:
                    k = (model.attention_layer_types[i], model.moe_layers[i])
                    counts[k] = counts.get(k, 0) + 1
                per_rank[r].append(tuple(counts.items()))
                index += stage.decoders
        ranks = tuple(tuple(chunks) for chunks in per_rank)
        cache[key] = ranks
    return cache[key]


def forecast_memory(ctx: Context) -> MemoryForecast:
    """The worst PP rank: per-kind activation inventories times the layers each chunk holds and the in-flight
    microbatches of the schedule, the loss logits, static memory and buffers."""
    from .activations import kept, layer_inventory, shard_of
    from .buffers import buffer_terms
    from .memory import overhead_gib
    from .perf import rank_layers
    from .recompute_picker import _applicable
    from .weights import padded_vocab, rank_params, static_terms

    c, m = ctx.cfg, ctx.model
    split = ctx.split.split
    sh = shard_of(ctx)
    labels = frozenset(_applicable(ctx))
    first_of = {}
    for i in range(m.num_layers):
        first_of.setdefault((m.attention_layer_types[i], m.moe_layers[i]), i)
    per_kind: dict[Kind, tuple[float, float, float, float]] = {}
    for k, i in first_of.items():
        inv = layer_inventory(ctx, sh, i)
        per_kind[k] = (kept(inv, frozenset(), frozenset()), kept(inv, labels, frozenset()),
                       sum(x.bytes for x in inv if x.layer_input), sum(x.bytes for x in inv))  # fmt: skip
    logits = (4 if c.cross_entropy_fusion != "te" else 2) * padded_vocab(ctx) / c.tp * sh.tokens
    kinds = _chunk_kinds(m, split)
    by_rank = rank_layers(split)
    worst = None
    for rank in range(c.pp):
        chunks = []  # per virtual stage: (none, selective, inputs) bytes of one microbatch
        largest = 0.0
        for stage, counts in zip(split.stages[rank], kinds[rank], strict=True):
            heads = (int(stage.loss) + stage.mtp) * logits
            chunks.append([sum(n * per_kind[k][j] for k, n in counts) + heads for j in range(3)])
            largest = max([largest, *(per_kind[k][3] for k, _ in counts)])
        in_flight = _in_flight_counts(c.pp, rank, split.vpp, ctx.num_microbatches or c.pp)
        held = [sum(n * ch[j] for n, ch in zip(in_flight, chunks, strict=True)) for j in range(3)]
        if rank not in (0, c.pp - 1) and worst is not None and held[1] <= worst.selective:
            continue  # a middle rank holding no more activations than one already seen
        layers = list(by_rank[rank])
        mtp = sum(st.mtp for st in split.stages[rank])
        terms = static_terms(ctx, rank_params(ctx, layers, mtp, rank == 0, rank == c.pp - 1))
        terms += buffer_terms(ctx, sh, layers, held[0])
        static = sum(t.bytes for t in terms) + overhead_gib(ctx) * GIB
        optimizer = sum(t.bytes for t in terms if "optimizer" in t.name)
        f = MemoryForecast(static, static - optimizer, held[0], held[1], held[2] + largest)
        worst = f if worst is None else MemoryForecast(*(max(a, b) for a, b in zip(
            (worst.static, worst.static_offloaded, worst.none, worst.selective, worst.full),
            (f.static, f.static_offloaded, f.none, f.selective, f.full), strict=True)))  # fmt: skip
    return worst


@lru_cache(maxsize=1024)
def _in_flight_counts(pp: int, rank: int, vpp: int, microbatches: int) -> tuple[int, ...]:
    """Microbatches each chunk holds at the schedule's peak, for chunks of equal size (a forecast)."""
    from .schedule import peak_in_flight

    _, counts = peak_in_flight(pp, rank, vpp, microbatches, [1.0] * vpp)
    return tuple(counts)


def memory_floor(ctx: Context) -> float:
    """Bytes no plan of this layout can go below: BF16 weights and gradients of the busiest rank, the layer
    inputs full recompute still keeps for every in-flight microbatch, and the fixed overhead."""
    from .memory import overhead_gib
    from .perf import _params_per_rank

    split = ctx.split.split
    c, m = ctx.cfg, ctx.model
    most = max(range(c.pp), key=split.rank_decoders)
    layers = list(range(split.rank_decoders(most)))
    dense, expert = _params_per_rank(ctx, layers)
    tokens = c.mbs * c.seq_len // (c.cp * (c.tp if ctx.sequence_parallel else 1))
    in_flight = min(c.pp, ctx.num_microbatches or 1)
    inputs = 2 * tokens * m.hidden_size * len(layers) * in_flight
    return 4 * (dense + expert) + inputs + overhead_gib(ctx) * GIB


def seconds_per_token(step) -> float:
    return step.step_s / step.tokens_per_step


def cheap_bounds(cands: list[Candidate], model, gpu, req, base) -> list[tuple[Candidate, Context]]:
    """Candidates with a split, whole microbatches and room for their weights, each with its time per token
    before recompute and offload (a lower bound of its plan's)."""
    out = []
    usable = gpu.usable_hbm_gib * GIB
    for cand in cands:
        ctx = Context(cfg=TrainingConfig(**_settings(cand, model, gpu, req, base)), model=model, gpu=gpu)
        if ctx.split.split is None or ctx.num_microbatches is None:
            continue
        if memory_floor(ctx) > usable:
            continue  # cannot fit whatever recompute and offload do
        bound = seconds_per_token(step_time(ctx))
        out.append((Candidate(**{**cand.__dict__, "bound_s": bound}), ctx))
    return out


def refined_bound(ctx: Context, req: PlanLayoutRequest) -> float | None:
    """Time per token with the recompute and offload the memory forecast says the layout needs (None: no fit).
    Never below the cheap bound: recompute and offload only add time."""
    usable = ctx.gpu.usable_hbm_gib * GIB
    f = forecast_memory(ctx)
    fraction, offload, static = 0.0, 0.0, f.static
    if req.allow_optimizer_offload and f.static + f.full > usable:
        static, offload = f.static_offloaded, f.static - f.static_offloaded
    if static + f.none > usable:
        if static + f.selective <= usable:
            fraction = recompute_fraction_of(ctx, _applicable_labels(ctx))
        elif static + f.full <= usable:
            fraction = 1.0
        else:
            return None
    return seconds_per_token(step_time(ctx, fraction, offload))


# --------------------------------------------------------------------------- evaluation


def recompute_fraction(ctx: Context) -> float:
    """Share of the decoder layers' forward compute replayed in backward by the recompute setting."""
    c = ctx.cfg
    if c.recompute_granularity is None:
        return 0.0
    if c.recompute_granularity == "full":
        return 1.0
    return recompute_fraction_of(ctx, set(ctx.recompute_modules))


def _applicable_labels(ctx: Context) -> set[str]:
    from .recompute_picker import _applicable

    return set(_applicable(ctx))


def recompute_fraction_of(ctx: Context, labels: set[str]) -> float:
    """Share of the forward GEMM work the given selective labels replay."""
    m = ctx.model
    total = replay = 0.0
    for i in range(m.num_layers):
        attn, _ = attention_params(m, m.attention_layer_types[i])
        shared, _, active, _ = mlp_params(m, m.moe_layers[i])
        layer = attn + shared + active
        total += layer
        if "mla_up_proj" in labels and m.is_mla:
            n = m.num_attention_heads
            replay += (m.q_lora_rank or 0) * n * (m.head_dim + (m.qk_pos_emb_head_dim or 0)) + (
                m.kv_lora_rank or 0
            ) * n * (m.head_dim + (m.v_head_dim or 0))
        if "mlp" in labels and not m.moe_layers[i]:
            replay += shared
        if "shared_experts" in labels and m.moe_layers[i]:
            replay += shared
        if "moe" in labels and m.moe_layers[i]:
            replay += active + shared
        replay += 0.005 * layer * len(labels & {"layernorm", "moe_act", "gdn_norm_out"})
    return min(1.0, replay / total) if total else 0.0


def _offloaded_state_bytes(ctx: Context) -> float:
    from .perf import _params_per_rank

    if not ctx.cfg.optimizer_cpu_offload_fraction:
        return 0.0
    dense, expert = 0.0, 0.0
    split = ctx.split.split
    layers = list(range(ctx.model.num_layers // max(1, ctx.cfg.pp)))
    if split is not None:
        layers = list(range(max(split.decoders_per_rank)))
    dense, expert = _params_per_rank(ctx, layers)
    shard = max(1, (ctx.layout.dp or 1) * ctx.cfg.cp)
    return (
        12 * ctx.cfg.optimizer_cpu_offload_fraction * (dense / shard + expert / max(1, ctx.layout.edp or 1))
    )


@dataclass
class Evaluated:
    cfg: TrainingConfig
    ctx: Context
    peak: float
    step: Any
    findings: list[Finding]
    notes: list[str]


def _gbs(req: PlanLayoutRequest, dp: int, mbs: int, pp: int, vpp: int | None) -> int:
    if req.gbs is not None:
        return req.gbs
    return mbs * dp * 8 * pp


def evaluate(
    cand: Candidate, model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest, base: dict
) -> Evaluated | None:
    settings = _settings(cand, model, gpu, req, base)
    cfg = TrainingConfig(**settings)
    ctx = Context(cfg=cfg, model=model, gpu=gpu)
    if has_errors(run(ctx)):
        return None
    notes: list[str] = []
    picker = Picker(ctx)
    best = picker.pick()
    if not picker.fits(best) and req.allow_optimizer_offload:
        for fraction in (0.5, 1.0):
            changes = {
                **best.changes,
                "optimizer_cpu_offload_fraction": fraction,
                "use_precision_aware_optimizer": True,
            }
            trial = picker.trial(changes)
            if picker.fits(trial):
                best = trial
                notes.append("recompute alone does not fit: optimizer CPU offload makes room")
                break
    if not picker.fits(best):
        return None
    cfg = best.cfg
    ctx = best.ctx
    found = run(ctx)
    if has_errors(found):
        return None
    st = step_time(ctx, recompute_fraction(ctx), _offloaded_state_bytes(ctx))
    return Evaluated(cfg, ctx, best.peak, st, found, notes)


def _why(e: Evaluated, best: Evaluated | None) -> list[str]:
    st, c = e.step, e.cfg
    terms = sorted(st.terms.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{k} {v:.2f}s" for k, v in terms[:3] if v > 0)
    out = [f"{st.tflops_per_gpu:.0f} model TFLOP/s per GPU, MFU {st.mfu:.1%}; largest terms: {top}"]
    if c.recompute_granularity:
        mods = (
            c.recompute_modules if c.recompute_granularity == "selective" else [f"full {c.recompute_method}"]
        )
        out.append(f"recompute {', '.join(mods)} to fit ({e.peak / GIB:.1f} GiB peak)")
    else:
        out.append(f"fits without recompute ({e.peak / GIB:.1f} GiB peak)")
    if c.optimizer_cpu_offload_fraction:
        out.append(f"optimizer CPU offload {c.optimizer_cpu_offload_fraction:.0%}")
    out += e.notes
    if best is not None and best is not e:
        out.append(f"{best.step.step_s / e.step.step_s:.0%} of the top plan's throughput per token")
    return out


def _plan(rank: int, e: Evaluated, best: Evaluated | None) -> Plan:
    c, ctx = e.cfg, e.ctx
    mm = memory_model(ctx)
    stages = [
        {"pp_rank": s.pp_rank, "role": s.role, "total_gib": s.total_gib,
         "components": {comp.component: comp.gib for comp in s.components}}
        for s in breakdown(ctx, mm)
    ]  # fmt: skip
    settings = {
        k: v for k, v in c.model_dump(mode="json").items() if v != TrainingConfig.model_fields[k].default
    }
    settings["model"] = ctx.model.id
    st = e.step
    return Plan(
        rank=rank,
        layout=ctx.layout.describe(),
        settings=settings,
        memory=PlanMemory(peak_gib=round(e.peak / GIB, 2), usable_gib=ctx.gpu.usable_hbm_gib, stages=stages),
        throughput=PlanThroughput(
            step_s=round(st.step_s, 3),
            tokens_per_s=round(st.tokens_per_step / st.step_s, 1),
            tflops_per_gpu=round(st.tflops_per_gpu, 1),
            mfu=round(st.mfu, 4),
            terms_s={k: round(v, 4) for k, v in st.terms.items()},
        ),
        why=_why(e, best),
        megatron_args=megatron_args_for(c),
        bridge_overrides=bridge_override_list(c),
        bridge_snippet=bridge_python_snippet(c),
        findings=[f for f in sort_findings(e.findings) if f.code not in ("PARALLEL_FOLDING",)],
    )


def plan_layout(req: PlanLayoutRequest) -> PlanLayoutResult:
    model = load_model(req.model)
    gpu = load_gpu(req.gpu)
    if req.launcher not in ("bridge", "megatron-lm"):
        raise InputError("launcher", req.launcher, "bridge or megatron-lm")
    precision = req.precision or default_precision(gpu)
    if precision != "bf16" and precision not in gpu.quant_recipes:
        raise InputError("precision", precision, f"one of {[*gpu.quant_recipes, 'bf16']} on {gpu.id}")
    mtp = model.mtp_num_layers
    base = {
        "model": model.id if model.id != "custom" else req.model,
        "gpu": gpu.id,
        "num_gpus": req.num_gpus,
        "seq_len": req.seq_len,
        "precision": precision,
        "dispatcher": req.dispatcher or default_dispatcher(gpu),
        "launcher": req.launcher,
    }
    if req.overhead_gib is not None:
        base["overhead_gib"] = req.overhead_gib
    if req.launcher == "megatron-lm":
        base.update(use_distributed_optimizer=True, moe_grouped_gemm=True)
    bounded = cheap_bounds(enumerate_candidates(model, gpu, req, mtp), model, gpu, req, base)
    if not bounded:
        raise InputError(
            "num_gpus",
            req.num_gpus,
            f"a GPU count that some TP x CP x PP and EP x PP factor for {model.name}",
        )
    # Best-first search: a candidate is first ranked by its cheap bound, then by the bound its memory forecast
    # implies, and only then evaluated in full; bounds only grow, so the search can stop as soon as the best
    # remaining bound cannot beat the N-th plan found.
    heap = [(cand.bound_s, i, False) for i, (cand, _) in enumerate(bounded)]
    heapq.heapify(heap)
    found: list[Evaluated] = []
    evaluated = 0
    while heap and evaluated < MAX_EVALUATED:
        bound, i, refined = heapq.heappop(heap)
        if (
            len(found) >= req.top_n
            and bound >= sorted(seconds_per_token(e.step) for e in found)[req.top_n - 1]
        ):
            break
        cand, ctx = bounded[i]
        if not refined:
            better = refined_bound(ctx, req)
            if better is not None:
                heapq.heappush(heap, (max(better, bound), i, True))
            continue
        evaluated += 1
        e = evaluate(cand, model, gpu, req, base)
        if e is not None:
            found.append(e)
    candidates = bounded
    references = _references(model, gpu, req)
    for _, evaluated_ref in references:
        if evaluated_ref is not None and not any(_same_plan(evaluated_ref, e) for e in found):
            found.append(evaluated_ref)
    found.sort(key=lambda e: seconds_per_token(e.step))
    best = found[0] if found else None
    plans = [_plan(i + 1, e, best) for i, e in enumerate(found[: req.top_n])]
    findings: list[Finding] = []
    return PlanLayoutResult(
        plans=plans,
        references=[_compare(layout, e, found) for layout, e in references],
        candidates=len(candidates),
        evaluated=evaluated,
        feasible=len(found),
        assumptions=[
            "Candidates: TP a power of two up to the NVLink domain (8 at most), CP powers of two the sequence and "
            "attention allow, PP powers of two with a split Megatron accepts, VPP from {1, 2, 3, 4, 6, 8, 12}, EP "
            "powers of two dividing the experts, ETP 1, MBS 1 (and 2 up to 8K tokens), sequence parallelism with "
            "TP > 1, cp_comm_type as size_cp chooses.",
            f"Memory: pick_recompute per candidate, then optimizer CPU offload if allowed; a plan must fit "
            f"{gpu.usable_hbm_gib} GiB with the memory model's overhead.",
            *PERF_ASSUMPTIONS,
        ],
        findings=findings,
    )


# --------------------------------------------------------------------------- published layouts


def _references(model: ModelSpec, gpu: GpuSpec, req: PlanLayoutRequest) -> list[tuple[Any, Evaluated | None]]:
    """Published layouts for this exact job, evaluated like a plan (their own recompute and offload)."""
    from .representative import representative_layouts

    out = []
    for layout in representative_layouts():
        c = layout.config
        if (load_model(c["model"]).id, c["gpu"], c["num_gpus"], c["seq_len"]) != (
            model.id, gpu.id, req.num_gpus, req.seq_len
        ):  # fmt: skip
            continue
        cfg = TrainingConfig(**_vpp_from_layout({**c, "launcher": req.launcher}))
        ctx = Context(cfg=cfg, model=model, gpu=gpu)
        found = run(ctx)
        mm = memory_model(ctx) if not has_errors(found) else None
        evaluated = None
        if mm is not None:
            peak = mm.peak_rank.total
            step = step_time(ctx, recompute_fraction(ctx), _offloaded_state_bytes(ctx))
            evaluated = Evaluated(cfg, ctx, peak, step, found, [f"published layout: {layout.title}"])
        out.append((layout, evaluated))
    return out


def _same_plan(a: Evaluated, b: Evaluated) -> bool:
    keys = ("tp", "cp", "pp", "ep", "etp", "mbs", "recompute_granularity", "recompute_modules")
    return all(getattr(a.cfg, k) == getattr(b.cfg, k) for k in keys) and a.ctx.vpp == b.ctx.vpp


def _compare(layout, e: Evaluated | None, found: list[Evaluated]) -> ReferenceComparison:
    base = dict(id=layout.id, title=layout.title, source=layout.source)
    if e is None:
        return ReferenceComparison(**base, layout="-", valid=False, fits=False, peak_gib=None, tflops_per_gpu=None,
                                   rank=None, verdict="the engine reports an error for this layout")  # fmt: skip
    fits = e.peak <= e.ctx.gpu.usable_hbm_gib * GIB
    rank = next((i + 1 for i, x in enumerate(found) if x is e), None) if fits else None
    top = found[0] if found else None
    if not fits:
        verdict = (
            f"estimated {e.peak / GIB:.1f} GiB per GPU, above the {e.ctx.gpu.usable_hbm_gib:g} GiB usable"
        )
    elif top is None or top is e:
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
        valid=not has_errors(e.findings),
        fits=fits,
        peak_gib=round(e.peak / GIB, 2),
        tflops_per_gpu=round(e.step.tflops_per_gpu, 1),
        rank=rank,
        verdict=verdict,
    )
