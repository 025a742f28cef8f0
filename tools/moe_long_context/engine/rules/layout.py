"""World factorisation under MoE parallel folding, head and expert divisibility, sequence parallelism."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .table import check, finding


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@check("layout")
def world_factorisation(ctx: Context) -> Iterator[Finding]:
    lay = ctx.layout
    world = lay.world
    if lay.dp is None:
        options = [d for d in _divisors(world) if d % (lay.tp * lay.pp) == 0]
        cps = sorted({d // (lay.tp * lay.pp) for d in options})
        yield finding(
            "LAYOUT_WORLD_DIVISIBILITY",
            f"num_gpus={world} is not divisible by TP x CP x PP = {lay.tp} x {lay.cp} x {lay.pp} = {lay.model_size}.",
            f"Pick TP x CP x PP dividing {world}: with TP={lay.tp} and PP={lay.pp}, CP may be one of {cps[:8]}"
            if cps
            else f"Pick TP and PP whose product divides {world}.",
            ["num_gpus", "tp", "cp", "pp"],
        )
    if lay.edp is None:
        eps = sorted(d // (lay.etp * lay.pp) for d in _divisors(world) if d % (lay.etp * lay.pp) == 0)
        eps = [e for e in eps if ctx.model.num_experts % e == 0]
        yield finding(
            "EXPERT_WORLD_DIVISIBILITY",
            f"num_gpus={world} is not divisible by ETP x EP x PP = {lay.etp} x {lay.ep} x {lay.pp} "
            f"= {lay.expert_model_size}.",
            f"Pick EP so that ETP x EP x PP divides {world}: with ETP={lay.etp} and PP={lay.pp}, EP may be "
            f"one of {eps[-8:]}"
            if eps
            else f"Pick ETP x PP dividing {world}.",
            ["num_gpus", "ep", "etp", "pp"],
        )
    if lay.dp is not None and lay.edp is not None and lay.tp * lay.cp * lay.ep * lay.pp > world:
        yield finding(
            "PARALLEL_FOLDING",
            f"TP x CP x EP x PP = {lay.tp * lay.cp * lay.ep * lay.pp} exceeds num_gpus={world}, which is fine: "
            f"experts fold into the DP x CP ranks (dense TP{lay.tp} x CP{lay.cp} x DP{lay.dp} x PP{lay.pp}, "
            f"experts ETP{lay.etp} x EP{lay.ep} x EDP{lay.edp} x PP{lay.pp}).",
            None,
            ["tp", "cp", "ep", "pp"],
        )
    if lay.dp == 1 and world > 1:
        yield finding(
            "DP_ONE",
            "DP = 1: every rank holds a distinct model shard; the global batch comes only from gradient "
            "accumulation and the distributed optimizer shards dense weights over CP only.",
            "Accept it for very long context, or free a factor of 2 from CP or PP to get DP = 2.",
            ["tp", "cp", "pp"],
        )


@check("layout")
def experts_and_heads(ctx: Context) -> Iterator[Finding]:
    m, c, lay = ctx.model, ctx.cfg, ctx.layout
    if m.num_experts % c.ep:
        ok = [e for e in _divisors(m.num_experts) if e <= max(c.ep * 2, 2)]
        yield finding(
            "EP_DIVIDES_EXPERTS",
            f"EP={c.ep} does not divide the {m.num_experts} routed experts of {m.name}.",
            f"Use an EP that divides {m.num_experts}, e.g. {ok[-3:]}.",
            ["ep"],
        )
    shapes = m.softmax_attention_shapes
    bad_heads = sorted({s.num_attention_heads for s in shapes if s.num_attention_heads % c.tp})
    if bad_heads:
        ok = [t for t in range(1, 65) if all(s.num_attention_heads % t == 0 for s in shapes)]
        yield finding(
            "TP_DIVIDES_HEADS",
            f"TP={c.tp} does not divide the {' and '.join(map(str, bad_heads))} attention heads"
            + (" of its layer types." if len(shapes) > 1 else "."),
            f"Use TP in {ok}.",
            ["tp"],
        )
    for g in sorted({s.num_query_groups for s in shapes}):
        if g % c.tp and c.tp % g:
            yield finding(
                "QUERY_GROUPS_TP",
                f"num_query_groups={g} is neither a multiple nor a divisor of TP={c.tp}.",
                f"Use a TP that divides {g} or is a multiple of it.",
                ["tp"],
            )
            break
    if m.has_linear_attention:
        size = c.tp * c.cp
        for name, heads in (("key", m.linear_num_key_heads), ("value", m.linear_num_value_heads)):
            if heads and heads % size:
                yield finding(
                    "GDN_HEADS_TP_CP",
                    f"Gated DeltaNet has {heads} linear {name} heads, not divisible by TP x CP = {size}.",
                    f"Keep TP x CP a divisor of {heads}.",
                    ["tp", "cp"],
                )
    if m.add_bias_linear and lay.etp != 1:
        yield finding(
            "MOE_BIAS_NEEDS_ETP1",
            f"{m.name} has linear biases; Megatron supports MoE biases only with ETP=1, got ETP={lay.etp}.",
            "Set etp=1 (expert_tensor_parallel_size=1).",
            ["etp"],
        )
    if c.etp is None and c.ep > 1 and c.tp > 1 and c.launcher == "bridge":
        yield finding(
            "ETP_DEFAULTED",
            f"etp is unset with EP={c.ep}: Megatron Bridge uses ETP=1 (Megatron Core alone would use TP={c.tp}).",
            "Set etp explicitly to make the launch independent of the framework layer.",
            ["etp"],
        )


@check("layout")
def sequence_parallel(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.tp > 1 and c.sequence_parallel is False:
        yield finding(
            "MOE_TP_NEEDS_SP",
            f"TP={c.tp} with sequence_parallel off: MoELayer.forward raises during training for any MoE model "
            "with attention TP > 1.",
            "Set sequence_parallel=true (--sequence-parallel).",
            ["sequence_parallel", "tp"],
        )
    if c.tp == 1 and c.sequence_parallel:
        yield finding(
            "SP_WITHOUT_TP",
            "sequence_parallel with TP=1: Megatron Bridge and Megatron-LM switch it off (Megatron Core's "
            "ModelParallelConfig alone raises 'Cannot use sequence parallelism without tensor parallelism').",
            "Drop sequence_parallel when TP=1.",
            ["sequence_parallel"],
        )
    if c.tp > 1 and c.sequence_parallel is None:
        yield finding(
            "SP_ASSUMED",
            f"sequence_parallel not given; assumed on because TP={c.tp} (MoE needs it).",
            "Pass sequence_parallel=true explicitly in the launch.",
            ["sequence_parallel"],
        )


@check("layout")
def nvlink_domains(ctx: Context) -> Iterator[Finding]:
    gpu, lay = ctx.gpu, ctx.layout
    if gpu is None:
        return
    domain = min(gpu.nvlink_domain, lay.world)
    if lay.tp > domain:
        yield finding(
            "TP_OUTSIDE_NVLINK",
            f"TP={lay.tp} exceeds the {gpu.nvlink_domain}-GPU NVLink domain of {gpu.id}: tensor-parallel "
            "collectives on every layer cross the scale-out network.",
            f"Keep TP <= {gpu.nvlink_domain}; use CP or PP across domains.",
            ["tp"],
        )
    if lay.ep * lay.etp > domain and lay.world > domain:
        yield finding(
            "EP_OUTSIDE_NVLINK",
            f"EP x ETP = {lay.ep * lay.etp} spans at least {-(-lay.ep * lay.etp // domain)} NVLink domains of "
            f"{gpu.nvlink_domain} GPUs: the token all-to-all crosses the network.",
            "Expected at this scale; DeepEP/HybridEP reduce its cost, EP overlap hides part of it.",
            ["ep"],
        )
