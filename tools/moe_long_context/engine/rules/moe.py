"""MoE dispatcher, capacity and EP-overlap checks."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .table import check, finding

BACKEND_NEEDS = {
    "deepep": "an Ampere/Hopper GPU or a B200/B300",
    "hybridep": "an Ampere, Hopper or Blackwell (sm 10.x) GPU",
    "ncclep": "a Hopper or Blackwell GPU",
}


def flex_backend(dispatcher: str) -> str | None:
    return dispatcher.split("-", 1)[1] if dispatcher.startswith("flex-") else None


@check("moe")
def dispatcher(ctx: Context) -> Iterator[Finding]:
    c, gpu, lay = ctx.cfg, ctx.gpu, ctx.layout
    backend = flex_backend(c.dispatcher)
    # Only Megatron Bridge gates the backends by GPU; Megatron-LM and Megatron Core have no such check.
    if backend and gpu is not None and backend not in gpu.flex_backends and c.launcher == "bridge":
        usable = [f"flex-{b}" for b in gpu.flex_backends] + ["alltoall"]
        yield finding(
            "DISPATCHER_GPU",
            f"{c.dispatcher} on {gpu.name}: Megatron Bridge allows the {backend} backend only on "
            f"{BACKEND_NEEDS[backend]} ({gpu.device_name}, sm {gpu.compute_capability[0]}."
            f"{gpu.compute_capability[1]} is not).",
            f"Use one of {usable}.",
            ["dispatcher", "gpu"],
        )
    if backend in ("deepep", "ncclep") and lay.etp * lay.ep <= 1:
        yield finding(
            "DISPATCHER_TPXEP",
            f"{c.dispatcher} needs ETP x EP > 1, got ETP={lay.etp}, EP={lay.ep}.",
            "Use EP > 1, or the alltoall dispatcher.",
            ["dispatcher", "ep"],
        )
    if backend == "deepep" and c.moe_pad_expert_input_to_capacity:
        yield finding(
            "DISPATCHER_DEEPEP_PAD",
            "flex-deepep with moe_pad_expert_input_to_capacity.",
            "Use dropless MoE with DeepEP, or the alltoall dispatcher for drop-and-pad.",
            ["dispatcher", "moe_pad_expert_input_to_capacity"],
        )
    if backend == "ncclep":
        yield finding(
            "DISPATCHER_NCCLEP_CAPACITY",
            "flex-ncclep sizes its receive buffer from moe_expert_rank_capacity_factor, which must be set.",
            "Set --moe-expert-rank-capacity-factor (generously: exceeding it hard-traps).",
            ["dispatcher"],
        )
    if c.dispatcher == "allgather" and c.variable_seq_lengths:
        yield finding(
            "DISPATCHER_ALLGATHER_VARLEN",
            "The allgather dispatcher with variable_seq_lengths.",
            "Use the alltoall or a flex dispatcher.",
            ["dispatcher", "variable_seq_lengths"],
        )
    if c.moe_router_padding_for_quantization and (c.dispatcher == "allgather" or c.precision == "bf16"):
        why = "the allgather dispatcher" if c.dispatcher == "allgather" else "BF16 (no FP8/FP4)"
        yield finding(
            "DISPATCHER_ALLGATHER_PADDING",
            f"moe_router_padding_for_quantization with {why}.",
            "Use it only with FP8/FP4 and the alltoall or flex dispatcher.",
            ["moe_router_padding_for_quantization", "dispatcher"],
        )
    if (
        c.moe_shared_expert_overlap
        and ctx.model.moe_shared_expert_intermediate_size
        and c.dispatcher == "allgather"
    ):
        yield finding(
            "DISPATCHER_SHARED_OVERLAP",
            "moe_shared_expert_overlap with the allgather dispatcher.",
            "Use the alltoall dispatcher (flex backends switch the overlap off in Bridge).",
            ["moe_shared_expert_overlap", "dispatcher"],
        )
    if gpu is not None and lay.ep > 1:
        if gpu.is_nvl72 and backend != "hybridep" and "hybridep" in gpu.flex_backends:
            yield finding(
                "DISPATCHER_ADVICE",
                f"{gpu.name}: HybridEP is the first choice on NVL72 (EP={lay.ep} all-to-all over NVLink).",
                "Consider dispatcher=flex-hybridep.",
                ["dispatcher"],
            )
        elif not gpu.is_nvl72 and backend is None and lay.ep * lay.etp > gpu.nvlink_domain:
            yield finding(
                "DISPATCHER_ADVICE",
                f"EP={lay.ep} spans several {gpu.nvlink_domain}-GPU nodes: DeepEP (or HybridEP) cuts the "
                "inter-node all-to-all cost compared with alltoall.",
                "Consider dispatcher=flex-deepep (alltoall is fine for bring-up).",
                ["dispatcher"],
            )


@check("moe")
def capacity_and_overlap(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    capacity = c.moe_capacity_factor is not None and c.moe_capacity_factor >= 0
    if c.moe_pad_expert_input_to_capacity and not capacity:
        yield finding(
            "MOE_PAD_NEEDS_CAPACITY",
            "moe_pad_expert_input_to_capacity without moe_capacity_factor.",
            "Set moe_capacity_factor (e.g. 1.0), or drop the padding.",
            ["moe_pad_expert_input_to_capacity", "moe_capacity_factor"],
        )
    if not c.ep_overlap:
        return
    problems = []
    if c.ep <= 1:
        problems.append("EP > 1")
    if c.dispatcher == "allgather":
        problems.append("the alltoall or flex dispatcher")
    if c.moe_shared_expert_overlap:
        problems.append("moe_shared_expert_overlap off")
    if ctx.mtp_layers > 1:
        problems.append("at most one MTP layer")
    if c.pp > 1 and ctx.vpp is None:
        problems.append("VPP when PP > 1")
    if c.dispatcher == "flex-ncclep" and "expert_fc1" in (c.activation_offload or []):
        problems.append("no expert_fc1 activation offload with the ncclep backend")
    if problems:
        yield finding(
            "EP_OVERLAP_RULES",
            "EP all-to-all overlap needs " + ", ".join(problems) + ".",
            "Meet those conditions or turn ep_overlap off.",
            ["ep_overlap", "ep", "dispatcher", "vpp", "activation_offload"],
        )
