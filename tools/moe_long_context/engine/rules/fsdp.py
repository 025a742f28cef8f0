"""Megatron-FSDP (``ddp.use_megatron_fsdp`` / ``--use-megatron-fsdp``) as Megatron Core 0.19.2 wraps an MoE model:
its EP-overlap path refuses per-layer CUDA graphs (``distributed/fsdp/mcore_fsdp_adapter.py``:168-178), and both
front ends turn the distributed optimizer on and MXFP8 gradient-buffer reuse off before the model is built
(Bridge ``training/config.py``:1065-1094, Megatron-LM ``arguments.py``:1100-1114); Megatron-LM also asserts the
fsdp_dtensor checkpoint format (:1146-1147), which the engine does not read.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Context
from ..findings import Finding
from .table import check, finding


@check("optimizer")
def megatron_fsdp(ctx: Context) -> Iterator[Finding]:
    c = ctx.cfg
    if not c.use_megatron_fsdp:
        return
    if c.ep_overlap and c.cuda_graph_impl in ("transformer_engine", "local"):
        yield finding(
            "FSDP_EP_OVERLAP_GRAPHS",
            f"Megatron-FSDP with EP overlap refuses per-layer CUDA graphs (cuda_graph_impl={c.cuda_graph_impl}) "
            "when it wraps the model.",
            "Use cuda_graph_impl full_iteration or none, or turn ep_overlap off.",
            ["use_megatron_fsdp", "ep_overlap", "cuda_graph_impl"],
        )
    changed = []
    if not c.use_distributed_optimizer:
        changed.append("turn the distributed optimizer on")
    if c.precision == "mxfp8" and c.reuse_grad_buf_for_mxfp8_param_ag:
        changed.append("turn reuse_grad_buf_for_mxfp8_param_ag off")
    if changed:
        yield finding(
            "FSDP_SETS_OPTIMIZER",
            "With Megatron-FSDP both front ends " + " and ".join(changed) + " before building the model.",
            None,
            ["use_megatron_fsdp", "use_distributed_optimizer", "reuse_grad_buf_for_mxfp8_param_ag"],
        )
    if c.launcher == "megatron-lm":
        yield finding(
            "FSDP_LM_CKPT_FORMAT",
            "Megatron-LM asserts --ckpt-format fsdp_dtensor with --use-megatron-fsdp (its default is torch_dist); "
            "the engine does not read --ckpt-format.",
            "Add --ckpt-format fsdp_dtensor to the launch.",
            ["use_megatron_fsdp"],
        )
