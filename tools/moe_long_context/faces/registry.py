"""The tool registry: each tool declared once, with its request model, result model and function.

The MCP server and the CLI are both generated from this list, so a tool or an argument is added in
one place and the two faces cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel

from ..tools.check_dp_budget import CheckDpBudgetRequest, CheckDpBudgetResult, check_dp_budget
from ..tools.estimate_memory import EstimateMemoryRequest, EstimateMemoryResult, estimate_memory
from ..tools.lint_config import LintConfigRequest, LintConfigResult, lint_config
from ..tools.pick_recompute import PickRecomputeRequest, PickRecomputeResult, pick_recompute
from ..tools.plan_layout import PlanLayoutRequest, PlanLayoutResult, plan_layout
from ..tools.size_cp import SizeCpRequest, SizeCpResult, size_cp
from ..tools.validate_cuda_graph_shapes import (
    ValidateCudaGraphsRequest,
    ValidateCudaGraphsResult,
    validate_cuda_graph_shapes,
)


@dataclass(frozen=True)
class Tool:
    name: str  # MCP tool name
    command: str  # CLI sub-command
    title: str
    description: str  # what it answers and when to call it
    request: type[BaseModel]
    result: type[BaseModel]
    fn: Callable[[BaseModel], BaseModel]

    def call(self, arguments: dict) -> BaseModel:
        """Validate ``arguments`` against the request model and run the tool."""
        return self.fn(self.request.model_validate(arguments))


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="size_cp",
        command="size-cp",
        title="Size context parallelism",
        description=(
            "Context-parallel size and cp_comm_type for a model at a sequence length: the smallest legal "
            "power-of-two CP near 4096 tokens per TP x CP shard (8192 on NVL72). Use first when planning long "
            "context. Returns cp, comm type, tokens per shard, alternatives."
        ),
        request=SizeCpRequest,
        result=SizeCpResult,
        fn=size_cp,
    ),
    Tool(
        name="check_dp_budget",
        command="check-dp-budget",
        title="Check the parallel layout and DP budget",
        description=(
            "Checks a TP/CP/PP/VPP/EP/ETP layout on a GPU count under MoE parallel folding (not the product "
            "rule), with the pipeline split and batch. Use on every layout before recommending it. Returns DP, "
            "EDP, microbatches, min_gpus, findings with fixes, nearest valid layouts."
        ),
        request=CheckDpBudgetRequest,
        result=CheckDpBudgetResult,
        fn=check_dp_budget,
    ),
    Tool(
        name="validate_cuda_graph_shapes",
        command="validate-cuda-graphs",
        title="Validate a CUDA-graph setting",
        description=(
            "Whether a cuda_graph_impl / cuda_graph_modules setting captures with this model and config (dropless "
            "MoE, recompute, offload, packed sequences). Use before enabling CUDA graphs. Returns validity, "
            "captured static shapes, what must stay fixed."
        ),
        request=ValidateCudaGraphsRequest,
        result=ValidateCudaGraphsResult,
        fn=validate_cuda_graph_shapes,
    ),
    Tool(
        name="estimate_memory",
        command="estimate-memory",
        title="Estimate per-rank GPU memory",
        description=(
            "Per-rank GPU memory of a full training config for the first, last and most loaded PP stages, by "
            "component (weights, grads, optimizer, activations, buffers, overhead). Use on any layout before "
            "recommending it. Returns peak_gib, fits, headroom, breakdown, assumptions."
        ),
        request=EstimateMemoryRequest,
        result=EstimateMemoryResult,
        fn=estimate_memory,
    ),
    Tool(
        name="pick_recompute",
        command="pick-recompute",
        title="Pick activation recompute",
        description=(
            "The cheapest Megatron Core 0.19 recompute labels that make a config fit its GPU, full recompute "
            "last. Use when estimate_memory says it does not fit. Returns the labels, peak before/after, Bridge "
            "overrides, Megatron-LM flags, next steps when nothing fits."
        ),
        request=PickRecomputeRequest,
        result=PickRecomputeResult,
        fn=pick_recompute,
    ),
    Tool(
        name="lint_config",
        command="lint",
        title="Lint a launch configuration",
        description=(
            "Checks a pasted Megatron-LM launch script, Bridge key=value overrides or ConfigContainer object "
            "against every rule at once. Use on any config a user pastes. Returns findings naming the flag or "
            "key, what is not checked, a corrected config in both dialects."
        ),
        request=LintConfigRequest,
        result=LintConfigResult,
        fn=lint_config,
    ),
    Tool(
        name="plan_layout",
        command="plan",
        title="Plan a long-context MoE layout",
        description=(
            "Ranked complete plans for model, GPU, GPU count and sequence length: layout, split, cp_comm_type, "
            "recompute, offload, dispatcher, precision, each passing every rule and fitting memory. Use for a "
            "layout from scratch. Returns plans (memory, TFLOP/s, flags, overrides), the published layout "
            "compared."
        ),
        request=PlanLayoutRequest,
        result=PlanLayoutResult,
        fn=plan_layout,
    ),
)

TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
TOOLS_BY_COMMAND = {tool.command: tool for tool in TOOLS}
