"""Context-parallel checks: sequence divisibility, cp_comm_type legality per attention type, hierarchy."""

from __future__ import annotations

from collections.abc import Iterator
from math import gcd, prod

from ...model.specs import AttentionShape, GpuSpec, ModelSpec
from ..context import Context
from ..findings import Finding
from ..launcher_defaults import unset_value
from .dsa import dsa_comm_type_findings
from .table import check, finding


def kv_heads_per_tp_rank(model: ModelSpec, tp: int, shape: AttentionShape | None = None) -> int:
    """KV heads one TP rank holds at core attention (Megatron keeps one when TP > query groups)."""
    if model.is_mla:
        return model.num_attention_heads // tp if model.num_attention_heads % tp == 0 else 1
    g = (shape or model.attention_shape()).num_query_groups
    return g // tp if g >= tp and g % tp == 0 else 1


def q_heads_per_tp_rank(model: ModelSpec, tp: int, shape: AttentionShape | None = None) -> int:
    n = (shape or model.attention_shape()).num_attention_heads
    return n // tp if n % tp == 0 else 1


def max_a2a_size(model: ModelSpec, tp: int) -> int:
    """Largest Ulysses (a2a) degree the heads allow: it must divide the Q and KV heads per TP rank of every
    attention layer shape."""
    heads = [q_heads_per_tp_rank(model, tp, s) for s in model.softmax_attention_shapes]
    heads += [kv_heads_per_tp_rank(model, tp, s) for s in model.softmax_attention_shapes]
    return gcd(*heads)  # the largest degree dividing every head count


def comm_type_findings(
    model: ModelSpec,
    tp: int,
    cp: int,
    comm: str | None,
    hierarchy: list[int] | None,
    packed: bool,
    launcher: str = "bridge",
) -> list[Finding]:
    """Errors Transformer Engine 2.14 / Megatron raise for this cp_comm_type on this model.

    ``comm`` None is resolved as ``launcher`` resolves it for the model's family (launcher_defaults.yaml).
    Checks that TE makes on the string as written (learned sinks, THD with a2a+p2p) read ``written``; the
    ones it makes after degrading an a2a+p2p with a size-1 level (context_parallel.py:4036-4042) read
    ``effective``.
    """
    out: list[Finding] = []
    written = comm if comm is not None else unset_value("cp_comm_type", launcher, model.family).value
    if written == "a2a+p2p" and not hierarchy:  # LM and Bridge assert this whatever the CP size
        out.append(
            finding(
                "CP_HIERARCHY_REQUIRED",
                "cp_comm_type a2a+p2p without hierarchical_cp_sizes.",
                f"Set hierarchical_cp_sizes=[a2a, p2p] with a2a x p2p = {cp}, a2a inside the NVLink domain"
                + (", or drop cp_comm_type at CP = 1" if cp == 1 else "")
                + ".",
                ["hierarchical_cp_sizes", "cp_comm_type"],
            )
        )
    if cp == 1:
        if hierarchy and prod(hierarchy) != 1:
            out.append(
                finding(
                    "CP_HIERARCHY_PRODUCT",
                    f"hierarchical_cp_sizes={hierarchy} multiply to {prod(hierarchy)}, but CP=1.",
                    "Drop hierarchical_cp_sizes, or make their product equal CP.",
                    ["hierarchical_cp_sizes", "cp"],
                )
            )
        return out
    if model.has_dsa:  # DSA all-gathers K/V itself; TE's CP limits do not apply (rules/dsa.py)
        return out + dsa_comm_type_findings(model, cp, comm)
    effective = written
    keys = ["cp_comm_type"]
    if effective == "a2a+p2p":
        if hierarchy and (prod(hierarchy) != cp or len(hierarchy) != 2):
            out.append(
                finding(
                    "CP_HIERARCHY_PRODUCT",
                    f"hierarchical_cp_sizes={hierarchy} must be two levels [a2a, p2p] multiplying to CP={cp}.",
                    f"Use two sizes whose product is {cp}, e.g. [{min(8, cp)}, {cp // min(8, cp)}].",
                    ["hierarchical_cp_sizes", "cp"],
                )
            )
    elif hierarchy:
        out.append(
            finding(
                "CP_HIERARCHY_UNUSED",
                f"hierarchical_cp_sizes={hierarchy} has no effect with cp_comm_type {effective}.",
                "Drop it, or use cp_comm_type a2a+p2p.",
                ["hierarchical_cp_sizes"],
            )
        )
        if prod(hierarchy) != cp:
            out.append(
                finding(
                    "CP_HIERARCHY_PRODUCT",
                    f"hierarchical_cp_sizes={hierarchy} multiply to {prod(hierarchy)}, not CP={cp}.",
                    "Make the product equal CP or drop the setting.",
                    ["hierarchical_cp_sizes", "cp"],
                )
            )
    # TE degrades a2a+p2p with a level of size 1 to plain p2p or a2a.
    a2a_size = None
    if effective == "a2a":
        a2a_size = cp
    elif effective == "a2a+p2p" and hierarchy and len(hierarchy) == 2 and prod(hierarchy) == cp:
        a2a_size = hierarchy[0]
        if hierarchy[0] == 1:
            effective, a2a_size = "p2p", None
        elif hierarchy[1] == 1:
            effective = "a2a"
    shown = (
        effective if comm is not None else f"{effective} (what {launcher} uses when cp_comm_type is unset)"
    )
    if a2a_size and a2a_size > 1:
        per_kind = [
            (q_heads_per_tp_rank(model, tp, s), kv_heads_per_tp_rank(model, tp, s), kind)
            for kind, s in model.shapes_of_layer_types.items()
        ]
        q, kv, where = next(
            ((q, kv, k) for q, kv, k in per_kind if q % a2a_size or kv % a2a_size), per_kind[0]
        )
        where = (
            f" on its {where}-attention layers" if where and len(model.softmax_attention_shapes) > 1 else ""
        )
        if q % a2a_size or kv % a2a_size:
            largest = max_a2a_size(model, tp)
            if model.has_softmax_sinks or model.has_sliding_window:
                # p2p is refused for sliding windows and sinks: the fix stays on a2a with a smaller CP or TP.
                wider = max_a2a_size(model, 1)
                fix = f"Keep cp_comm_type a2a with CP at most {largest} at TP={tp}" + (
                    f", or lower TP (TP=1 allows a2a up to {wider})" if tp > 1 and wider > largest else ""
                )
                fix += (
                    "; learned softmax sinks allow no other cp_comm_type."
                    if model.has_softmax_sinks
                    else "; or use cp_comm_type all_gather."
                )
            else:
                fix = f"Use cp_comm_type p2p, or an a2a size dividing {kv} (at most {largest})."
            out.append(
                finding(
                    "CP_A2A_HEADS",
                    f"a2a over {a2a_size} ranks needs the heads per TP rank divisible by {a2a_size}: "
                    f"TP={tp} leaves {q} query and {kv} KV heads per rank{where}.",
                    fix,
                    [*keys, "cp", "tp"],
                )
            )
    # MCore 0.19 pads V to the Q/K head dim for THD (multi_latent_attention.py:85-99), so TE's MLA restriction
    # (k and v head dims differ) applies only to unpacked sequences.
    if model.is_mla and not packed and effective not in ("p2p", "a2a+p2p"):
        out.append(
            finding(
                "CP_MLA_COMM_TYPE",
                f"{model.name} uses MLA (K and V head dims differ); TE 2.14 runs MLA with CP on unpacked "
                f"sequences only over p2p or a2a+p2p, not {shown}.",
                "Use cp_comm_type p2p (or a2a+p2p with hierarchical_cp_sizes).",
                keys,
            )
        )
    if model.has_sliding_window and effective not in ("a2a", "all_gather"):
        out.append(
            finding(
                "CP_SLIDING_WINDOW_COMM_TYPE",
                f"{model.name} has sliding-window layers; TE 2.14 supports them with CP only over a2a or "
                f"all_gather, not {shown}.",
                "Set cp_comm_type a2a"
                + (" (learned sinks allow nothing else)" if model.has_softmax_sinks else "")
                + ".",
                keys,
            )
        )
    if model.has_softmax_sinks and written != "a2a":
        # TE's backend filter reads the string as written: any a2a+p2p fails, [CP, 1] included.
        out.append(
            finding(
                "CP_SINKS_COMM_TYPE",
                f"{model.name} uses learned softmax sinks; TE 2.14 supports them with CP only over a2a, "
                f"not {written if comm is not None else shown}.",
                "Set cp_comm_type a2a (CP is then bounded by the KV heads per TP rank).",
                keys,
            )
        )
    if packed and (written == "a2a+p2p" or effective == "all_gather"):
        # a2a+p2p asserts "not thd" before it degrades a size-1 level (context_parallel.py:4031-4042).
        out.append(
            finding(
                "CP_THD_COMM_TYPE",
                f"Packed (THD) sequences are not supported by {written} CP in TE 2.14"
                + (
                    f" (even with hierarchical_cp_sizes={hierarchy})"
                    if written == "a2a+p2p" and hierarchy
                    else ""
                )
                + ".",
                "Use cp_comm_type p2p or a2a with packed sequences.",
                [*keys, "packed_sequences"],
            )
        )
    return out


def sequence_findings(seq: int, tp: int, cp: int, sp: bool) -> list[Finding]:
    out = []
    if cp > 1 and seq % (2 * cp):
        good = [c for c in (cp // 2, cp * 2) if c >= 1 and seq % (2 * c) == 0]
        below = seq // (2 * cp) * 2 * cp  # 0 below the first multiple: no length to propose
        lengths = [n for n in (below, below + 2 * cp) if n >= 1]
        out.append(
            finding(
                "SEQ_CP_DIVISIBILITY",
                f"seq_len={seq} is not divisible by 2 x CP = {2 * cp}.",
                f"Use seq_len {' or '.join(str(n) for n in lengths)}"
                + (f", or CP in {good}" if good else "")
                + ".",
                ["seq_len", "cp"],
            )
        )
    if sp and tp > 1 and seq % (cp * tp):
        out.append(
            finding(
                "SEQ_CP_TP_DIVISIBILITY",
                f"With sequence parallelism each CP shard of {seq} tokens is split over TP={tp}: seq_len must "
                f"be divisible by CP x TP = {cp * tp}.",
                f"Use seq_len {(seq // (cp * tp) + 1) * cp * tp}"
                + (f", or a TP that divides {seq // cp}." if seq % cp == 0 else "."),
                ["seq_len", "cp", "tp"],
            )
        )
    return out


def shard_target(gpu: GpuSpec | None) -> int:
    """Tokens per TP x CP shard to start from: about 4096 on 8-GPU NVLink, about 8192 on NVL72."""
    return 8192 if gpu is not None and gpu.is_nvl72 else 4096


@check("sequence")
def sequence_divisibility(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.seq_len is not None:
        yield from sequence_findings(c.seq_len, c.tp, c.cp, ctx.sequence_parallel)


@check("cp")
def comm_type(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    yield from comm_type_findings(
        ctx.model, c.tp, c.cp, c.cp_comm_type, c.hierarchical_cp_sizes, c.packed_sequences, c.launcher
    )
    default = ctx.cp_comm_default
    if c.cp > 1 and default is not None and default.caveat:
        yield finding(
            "CP_COMM_TYPE_ASSUMED",
            f"cp_comm_type is unset; the engine takes {default.value}, as {c.launcher}'s recipes for "
            f"{ctx.model.family} set it ({default.source}). {default.caveat}",
            f"Set cp_comm_type={default.value} explicitly.",
            ["cp_comm_type"],
        )
    if c.cp > 1 and c.packed_sequences:
        yield finding(
            "CP_PACKED_DOCUMENTS",
            f"Packed sequences with CP={c.cp}: every document is padded to a multiple of {2 * c.cp} tokens.",
            None,
            ["packed_sequences", "cp"],
        )


def finetuning(launcher: str, peft: str | None, packed_sequences: bool | None) -> bool:
    """A Bridge job on a fine-tuning dataset: LoRA (the PEFT recipes read SFT datasets) or offline packing, which
    only Bridge's SFT dataset configs have (data/builders/gpt_sft.py:127). An unpacked full SFT given as overrides
    does not show which dataset it reads."""
    return launcher == "bridge" and (peft == "lora" or bool(packed_sequences))


@check("cp")
def finetuning_loss(ctx: Context) -> Iterator[Finding]:
    """Bridge 0.6.2 training/config.py:1439-1454 (ConfigContainer.validate): fine-tuning with CP > 1 asserts the
    per-token loss, so that a CP rank whose tokens are all masked does not turn the loss into NaN."""
    c = ctx.cfg
    if c.cp == 1 or not finetuning(c.launcher, c.peft, c.packed_sequences) or c.calculate_per_token_loss:
        return
    job = "LoRA" if c.peft == "lora" else "packed SFT"
    if c.calculate_per_token_loss is False:
        yield finding(
            "FINETUNE_CP_PER_TOKEN_LOSS",
            f"{job} with CP={c.cp} and model.calculate_per_token_loss=false: Bridge asserts it is on when "
            "fine-tuning with CP > 1.",
            "Set model.calculate_per_token_loss=true (and keep ddp.average_in_collective=false).",
            ["calculate_per_token_loss", "cp"],
        )
    else:
        yield finding(
            "FINETUNE_CP_PER_TOKEN_LOSS_UNSEEN",
            f"{job} with CP={c.cp}: Bridge asserts model.calculate_per_token_loss=true when fine-tuning with CP > 1, "
            "and the overrides leave it to the recipe (off in the SFT and PEFT bases, recipes/common.py).",
            "Set model.calculate_per_token_loss=true unless the recipe does (and keep ddp.average_in_collective=false).",
            ["calculate_per_token_loss", "cp"],
        )


@check("cp")
def shard_size(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if c.seq_len is None or (c.cp == 1 and c.seq_len <= 16384):
        return
    shard = c.seq_len // (c.cp * c.tp)
    target = shard_target(ctx.gpu)
    if shard < 1024:
        yield finding(
            "CP_SHARD_SIZE",
            f"{shard} tokens per TP x CP shard (TP={c.tp}, CP={c.cp}): attention kernels this small are "
            f"dominated by communication (target about {target}).",
            f"Use a smaller CP (about {max(1, c.seq_len // (target * c.tp))}) and spend the GPUs on DP or EP.",
            ["cp"],
        )
    elif shard > 4 * target:
        yield finding(
            "CP_SHARD_SIZE",
            f"{shard} tokens per TP x CP shard (TP={c.tp}, CP={c.cp}), over 4x the usual target of {target}: "
            "activations and attention time per rank grow with it.",
            "Check memory with estimate_memory; size_cp gives the CP for the target.",
            ["cp"],
        )
    if ctx.gpu is not None and c.cp * c.tp > ctx.gpu.nvlink_domain and ctx.cp_comm_type == "a2a":
        yield finding(
            "CP_OUTSIDE_NVLINK",
            f"TP x CP = {c.tp * c.cp} spans more than one {ctx.gpu.nvlink_domain}-GPU NVLink domain with a2a: "
            "the all-to-all of every attention layer crosses the network.",
            "Use a2a+p2p with the a2a level inside the domain, or p2p.",
            ["cp_comm_type", "cp"],
        )
    levels = c.hierarchical_cp_sizes or []
    if (
        ctx.gpu is not None
        and ctx.cp_comm_type == "a2a+p2p"
        and levels
        and c.tp * levels[0] > ctx.gpu.nvlink_domain
    ):
        inside = max((d for d in range(1, levels[0]) if levels[0] % d == 0 and c.tp * d <= ctx.gpu.nvlink_domain),
                     default=1)  # fmt: skip
        yield finding(
            "CP_OUTSIDE_NVLINK",
            f"The a2a level of a2a+p2p (TP x {levels[0]} = {c.tp * levels[0]} ranks) spans more than one "
            f"{ctx.gpu.nvlink_domain}-GPU NVLink domain: its all-to-all of every attention layer crosses the network.",
            f"Put the a2a level inside the domain: hierarchical_cp_sizes=[{inside}, {c.cp // inside}] (size_cp "
            "chooses it).",
            ["hierarchical_cp_sizes", "cp_comm_type"],
        )
