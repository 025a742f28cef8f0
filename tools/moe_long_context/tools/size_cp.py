"""size_cp: the context-parallel size and cp_comm_type for a sequence length.

Start from a target of tokens per TP x CP shard (about 4096 on 8-GPU NVLink systems, about 8192 on
NVL72), take the smallest power-of-two CP that reaches it, and keep only CPs every rule accepts:
``seq % (2 x CP) == 0``, ``seq % (CP x TP) == 0`` with sequence parallelism, the attention type's
cp_comm_type limits in Transformer Engine 2.14, and Gated DeltaNet heads over TP x CP.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..engine.config import MAX_GPUS, GpuArgs, LauncherArgs, ModelArgs, _Args
from ..engine.findings import Finding, has_errors, sort_findings
from ..engine.rules import finding
from ..engine.rules.cp import comm_type_findings, max_a2a_size, sequence_findings, shard_target
from ..engine.rules.mamba import mamba_tp_cp_problems
from ..engine.rules.providers import max_cp, max_tp
from ..errors import InputError
from ..model.catalog import load_gpu, load_model
from ..model.params_hybrid import mamba_dims
from ..model.specs import GpuSpec, ModelSpec


class SizeCpArgs(_Args):
    seq_len: int = Field(ge=1, le=16 * 1024 * 1024, description="Training sequence length in tokens.")
    tp: int = Field(
        default=1, ge=1, le=MAX_GPUS, description="Tensor parallel size the CP shards are split by."
    )
    sequence_parallel: bool | None = Field(
        default=None, description="Sequence parallelism; unset means on exactly when TP > 1."
    )
    num_gpus: int | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="World size; when given, TP x CP must divide it."
    )
    packed_sequences: bool = Field(default=False, description="Packed (THD) sequences.")
    target_tokens_per_shard: int | None = Field(
        default=None,
        ge=256,
        le=1024 * 1024,
        description="Tokens per TP x CP shard to aim for. Default: 4096 on 8-GPU NVLink systems, 8192 on NVL72.",
    )


class SizeCpRequest(LauncherArgs, SizeCpArgs, GpuArgs, ModelArgs):  # bases in reverse order of the fields
    """A sequence length to size context parallelism for."""


class CpOption(BaseModel):
    tp: int
    cp: int
    cp_comm_type: str | None
    hierarchical_cp_sizes: list[int] | None
    tokens_per_shard: int = Field(description="seq / (TP x CP).")
    why: str


class SizeCpResult(BaseModel):
    cp: int = Field(description="Recommended context-parallel size.")
    cp_comm_type: str | None = Field(description="Recommended --cp-comm-type (None when CP = 1).")
    hierarchical_cp_sizes: list[int] | None = Field(description="[a2a, p2p] sizes for a2a+p2p.")
    tp: int
    seq_len: int
    tokens_per_rank: int = Field(description="Sequence tokens each CP rank holds: seq / CP.")
    tokens_per_shard: int = Field(
        description="Tokens per TP x CP shard: seq / (TP x CP), the sizing quantity."
    )
    target_tokens_per_shard: int = Field(description="The target the CP was sized for.")
    reason: str = Field(description="How the CP and the comm type were chosen.")
    constraints: list[str] = Field(description="Limits that ruled CPs out, and why.")
    alternatives: list[CpOption] = Field(description="Other legal (TP, CP) choices and what they trade.")
    findings: list[Finding]


def _constraint_problems(
    model: ModelSpec, seq: int, tp: int, cp: int, sp: bool, packed: bool, num_gpus: int | None
) -> list[str]:
    """Why a CP is illegal for this model and sequence (empty when it is legal for some comm type)."""
    problems = [f.message for f in sequence_findings(seq, tp, cp, sp)]
    limit = max_cp(model)
    if limit is not None and cp > limit:
        problems.append(f"{model.name}'s Bridge provider allows CP <= {limit}")
    tp_limit = max_tp(model)
    if tp_limit is not None and tp > tp_limit:
        problems.append(f"{model.name}'s Bridge provider allows TP <= {tp_limit}")
    if model.has_linear_attention:
        for heads in (model.linear_num_key_heads, model.linear_num_value_heads):
            if heads and heads % (tp * cp):
                problems.append(f"Gated DeltaNet heads ({heads}) must divide by TP x CP = {tp * cp}")
                break
    if model.has_mamba:  # Mamba's head-parallel CP (rules/mamba.py)
        heads, _, _, groups, _ = mamba_dims(model)
        problems += [message for _, message in mamba_tp_cp_problems(heads, groups, tp, cp)]
    if num_gpus is not None and num_gpus % (tp * cp):
        problems.append(f"TP x CP = {tp * cp} does not divide num_gpus={num_gpus}")
    if cp > 1 and comm_type_for(model, None, tp, cp, packed)[0] is None:
        problems.append(f"no cp_comm_type supports CP={cp} at TP={tp} for this attention")
    return problems


def comm_type_for(
    model: ModelSpec, gpu: GpuSpec | None, tp: int, cp: int, packed: bool = False
) -> tuple[str | None, list[int] | None, str]:
    """(cp_comm_type, hierarchical sizes, reason) for a legal CP, or (None, None, why not)."""
    if cp == 1:
        return None, None, "CP=1 needs no cp_comm_type."
    if model.has_dsa:
        return (
            "all_gather",
            None,
            "DeepSeek sparse attention runs CP only over allgather (Megatron Core 0.19.2 DSA)",
        )
    domain = gpu.nvlink_domain if gpu is not None else 8
    a2a_max = max_a2a_size(model, tp)

    def legal(comm: str, hierarchy: list[int] | None = None) -> bool:
        found = comm_type_findings(model, tp, cp, comm, hierarchy, packed)
        return not has_errors(found)

    if model.has_softmax_sinks or model.has_sliding_window:
        if legal("a2a"):
            return (
                "a2a",
                None,
                (
                    "sliding-window/sink attention supports CP only over a2a (or all_gather without sinks) in TE 2.14"
                ),
            )
        if legal("all_gather"):
            return (
                "all_gather",
                None,
                "sliding-window attention: a2a is ruled out by the heads, all_gather works",
            )
        return (
            None,
            None,
            f"a2a needs heads per TP rank divisible by CP (at most {a2a_max}); nothing else is legal",
        )
    if tp * cp <= domain:
        reason = (
            f"TP x CP = {tp * cp} fits one {domain}-GPU NVLink domain: the p2p ring overlaps the KV exchange"
        )
        if not model.is_mla and a2a_max >= cp:
            reason += f"; a2a also works (heads per TP rank divide by {cp})"
        return "p2p", None, reason
    per_domain = max(1, domain // tp)
    a2a = 1
    while a2a * 2 <= min(per_domain, a2a_max, cp) and cp % (a2a * 2) == 0 and a2a_max % (a2a * 2) == 0:
        a2a *= 2
    if a2a > 1 and not packed and legal("a2a+p2p", [a2a, cp // a2a]):
        return (
            "a2a+p2p",
            [a2a, cp // a2a],
            (
                f"TP x CP = {tp * cp} spans {tp * cp // domain} NVLink domains: a2a over {a2a} ranks inside a domain, "
                f"p2p ring over {cp // a2a} across domains (hierarchical CP)"
            ),
        )
    return "p2p", None, f"TP x CP = {tp * cp} spans NVLink domains; the heads allow no a2a level, so p2p ring"


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, ... up to ``limit``: the sizes the CP search and the planner try."""
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def size_cp(req: SizeCpRequest) -> SizeCpResult:
    model = load_model(req.model)
    gpu = load_gpu(req.gpu) if req.gpu is not None else None
    seq, tp = req.seq_len, req.tp
    sp = tp > 1 and (req.sequence_parallel if req.sequence_parallel is not None else True)
    target = req.target_tokens_per_shard or shard_target(gpu)
    limit = min(req.num_gpus or MAX_GPUS, seq) // tp
    if limit < 1:
        raise InputError("tp", tp, f"at most num_gpus={req.num_gpus}")
    if req.num_gpus and req.num_gpus % tp:
        raise InputError("tp", tp, f"a divisor of num_gpus={req.num_gpus}")
    if not model.tp_splits_attention(tp):  # MCore transformer_config.py:1323-1345 raises otherwise
        heads = sorted({(s.num_attention_heads, s.num_query_groups) for s in model.softmax_attention_shapes})
        raise InputError("tp", tp, "a TP that divides the query heads and divides or is divided by the key/value heads "
                         f"(heads, KV heads: {heads}); Megatron Core raises otherwise")  # fmt: skip
    legal, constraints = [], []
    for cp in powers_of_two(limit):
        problems = _constraint_problems(model, seq, tp, cp, sp, req.packed_sequences, req.num_gpus)
        if problems:
            if seq / (tp * cp) >= target / 4:  # only report limits near the useful range
                constraints.append(f"CP={cp}: " + "; ".join(problems))
        else:
            legal.append(cp)
    if not legal:
        raise InputError(
            "seq_len",
            seq,
            f"a length some CP can split at TP={tp} (no power-of-two CP is legal: {constraints[:2]})",
        )
    reaching = [cp for cp in legal if seq / (tp * cp) <= target]
    cp = reaching[0] if reaching else legal[-1]
    ideal = seq / (tp * target)
    if cp == 1 and reaching:
        reason = f"{seq} tokens at TP={tp} already fit the {target}-token shard target: no CP needed"
    elif reaching:
        reason = (
            f"{seq} / (TP={tp} x {target} tokens) = {ideal:g}; the smallest legal power-of-two CP reaching the "
            f"target is {cp}"
        )
    else:
        reason = (
            f"{seq} / (TP={tp} x {target} tokens) = {ideal:g}, but the largest legal CP is {cp}; shards stay at "
            f"{seq // (tp * cp)} tokens"
        )
    comm, hierarchy, comm_reason = comm_type_for(model, gpu, tp, cp, req.packed_sequences)
    findings = []
    if comm is not None:
        findings += comm_type_findings(model, tp, cp, comm, hierarchy, req.packed_sequences, req.launcher)
    if not reaching:
        why = f" ({constraints[0].split(': ', 1)[1]})" if cp == 1 and constraints else ""
        findings.append(
            finding(
                "CP_SHARD_SIZE",
                f"The model's attention limits CP to {cp} at TP={tp}{why}: {seq // (tp * cp)} tokens per shard "
                f"against a target of {target}.",
                "Check memory with estimate_memory; more TP (inside the NVLink domain) or PP relieves it.",
                ["cp", "tp"],
            )
        )
    return SizeCpResult(
        cp=cp,
        cp_comm_type=comm,
        hierarchical_cp_sizes=hierarchy,
        tp=tp,
        seq_len=seq,
        tokens_per_rank=seq // cp,
        tokens_per_shard=seq // (tp * cp),
        target_tokens_per_shard=target,
        reason=reason + ". " + comm_reason.rstrip(".") + ".",
        constraints=constraints,
        alternatives=_alternatives(model, gpu, req, cp, legal, sp),
        findings=sort_findings(findings),
    )


def _alternatives(
    model: ModelSpec, gpu: GpuSpec | None, req: SizeCpRequest, cp: int, legal: list[int], sp: bool
):
    seq, tp = req.seq_len, req.tp
    options: list[CpOption] = []

    def add(t: int, c: int, why: str) -> None:
        comm, hierarchy, _ = comm_type_for(model, gpu, t, c, req.packed_sequences)
        options.append(
            CpOption(
                tp=t,
                cp=c,
                cp_comm_type=comm,
                hierarchical_cp_sizes=hierarchy,
                tokens_per_shard=seq // (t * c),
                why=why,
            )
        )

    index = legal.index(cp)
    if index + 1 < len(legal):
        add(tp, legal[index + 1], "more CP: smaller shards and activations, more attention communication")
    if index > 0:
        add(tp, legal[index - 1], "less CP: frees GPUs for DP/EP, larger activations per rank")
    domain = gpu.nvlink_domain if gpu is not None else 8
    t, c = tp * 2, cp // 2
    while c >= 1 and t * c <= max(domain, tp * cp) and len(options) < 5:
        heads_ok = model.tp_splits_attention(t)
        if (
            heads_ok
            and t <= domain
            and not _constraint_problems(model, seq, t, c, True, req.packed_sequences, req.num_gpus)
        ):
            add(
                t,
                c,
                f"trade CP for TP inside the {domain}-GPU NVLink domain (same shard size, TP also shards weights)",
            )
        t, c = t * 2, c // 2
    return options
