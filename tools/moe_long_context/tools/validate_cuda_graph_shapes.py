"""validate_cuda_graph_shapes: can this CUDA-graph setting capture, and what shapes does it freeze?

Per-layer graphs (transformer_engine) capture static inputs ``[seq/CP (/TP with SP), MBS, hidden]`` in
BF16 for every microbatch a rank keeps in flight (one without PP); full_iteration captures the whole
step. Rules come from Megatron Core 0.19 ``transformer_config.py`` and Megatron Bridge 0.6.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from ..engine.config import (
    MAX_GPUS,
    MAX_SEQ_LEN,
    BatchArgs,
    ContextParallelArgs,
    CudaGraphArgs,
    DataArgs,
    FsdpArgs,
    LauncherArgs,
    ModelArgs,
    MoEArgs,
    ParallelArgs,
    PipelineSplitArgs,
    PrecisionArgs,
    RecomputeArgs,
    TrainingConfig,
    _Args,
)
from ..engine.context import build_context
from ..engine.findings import Finding, Judged, has_errors
from ..engine.rules import run_tool
from ..engine.rules.graphs import normalize
from ..engine.rules.upstream import coverage
from ..errors import InputError

GRAPH_FAMILIES = ("graphs", "sequence")


class GraphShapeArgs(_Args):
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="Training sequence length (fixed for the run).")
    num_gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS,
        description="World size, to count the microbatches captured with PP. Unset: DP = 1 is assumed.",
    )
    gpu: str | None = Field(default=None, description="GPU catalog id (optional).")


class ValidateCudaGraphsRequest(  # bases in reverse order of the fields
    LauncherArgs,
    FsdpArgs,  # Megatron-FSDP changes what MXFP8 parameter gathering needs (rules/precision.py)
    PrecisionArgs,
    DataArgs,
    MoEArgs,
    RecomputeArgs,
    CudaGraphArgs,
    ContextParallelArgs,
    BatchArgs,
    PipelineSplitArgs,
    ParallelArgs,
    GraphShapeArgs,
    ModelArgs,
):
    """A CUDA-graph setting together with the layout and MoE settings it depends on."""


class CapturedTensor(BaseModel):
    name: str
    shape: list[int]
    dtype: str
    note: str


class ValidateCudaGraphsResult(Judged):
    valid: bool = Field(description="True when no finding is an error.")
    cuda_graph_impl: str = Field(
        description="Implementation after Megatron's migration of deprecated values."
    )
    cuda_graph_modules: list[str] = Field(description="Modules captured per layer ([] = the whole layer).")
    captured_shapes: list[CapturedTensor] = Field(
        description="The static tensors the graphs are captured with."
    )
    microbatches_captured: int | None = Field(
        description="Microbatches captured per layer and model chunk (1 without PP; every in-flight one with PP)."
    )
    static_requirements: list[str] = Field(description="What must stay fixed for the whole run.")
    findings: list[Finding]


def validate_cuda_graph_shapes(req: ValidateCudaGraphsRequest) -> ValidateCudaGraphsResult:
    data = req.model_dump(exclude_unset=True)
    if data.get("num_gpus") is None:
        etp = req.etp if req.etp is not None else (1 if req.ep > 1 else req.tp)
        data["num_gpus"] = math.lcm(req.tp * req.cp * req.pp, etp * req.ep * req.pp)
        if data["num_gpus"] > MAX_GPUS:
            raise InputError("num_gpus", None, f"a world size: this layout needs {data['num_gpus']} GPUs")
    ctx = build_context(TrainingConfig(**data))
    findings = run_tool(ctx, GRAPH_FAMILIES)
    setting = normalize(ctx)
    c = ctx.cfg
    shapes: list[CapturedTensor] = []
    requirements: list[str] = []
    micro = None
    if setting.on:
        tokens = c.seq_len // c.cp // (c.tp if ctx.sequence_parallel else 1)
        split = "seq/CP" + ("/TP" if ctx.sequence_parallel else "")
        shapes.append(
            CapturedTensor(
                name="hidden_states",
                shape=[tokens, c.mbs, ctx.model.hidden_size],
                dtype="bfloat16",
                note=f"[{split}, MBS, hidden] input of every captured layer/module",
            )
        )
        if setting.impl == "full_iteration":
            micro = ctx.num_microbatches
            shapes.append(
                CapturedTensor(
                    name="tokens",
                    shape=[c.mbs, c.seq_len // c.cp],
                    dtype="int64",
                    note="the whole training step is one graph: data-loader outputs are copied into static buffers",
                )
            )
        else:
            micro = 1 if c.pp == 1 and not c.ep_overlap else ctx.num_microbatches
        requirements = [
            f"seq_len fixed at {c.seq_len} (pad or pack every sample to it)",
            f"micro batch size fixed at {c.mbs}",
            "no variable-length batches (variable_seq_lengths off)",
        ]
        if setting.impl == "full_iteration":
            # the whole step is one graph, experts included: nothing of the layer runs eagerly
            requirements.append(
                f"microbatches per step fixed at {micro} (global batch size and DP unchanged)"
                if micro
                else "microbatches per step fixed (global batch size and DP unchanged)"
            )
        elif ctx.model.num_experts and not (
            c.moe_capacity_factor is not None and c.moe_pad_expert_input_to_capacity
        ):
            requirements.append(
                "dropless MoE: expert computation stays eager; capture moe_router + moe_preprocess"
            )
    return ValidateCudaGraphsResult(
        valid=not has_errors(findings),
        cuda_graph_impl=setting.impl,
        cuda_graph_modules=setting.modules,
        captured_shapes=shapes,
        microbatches_captured=micro,
        static_requirements=requirements,
        findings=findings,
        **coverage(ctx.cfg, ctx.model),
    )
