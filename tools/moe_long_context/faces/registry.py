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
from ..tools.estimate_throughput import (
    EstimateThroughputRequest,
    EstimateThroughputResult,
    estimate_throughput,
)
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
        """Validate ``arguments`` (JSON values, as MCP sends them) against the request model and run the tool."""
        return self.fn(validate_arguments(self.request, arguments))


def validate_arguments(request: type[BaseModel], arguments: dict) -> BaseModel:
    """The request from JSON-typed arguments, strictly: a boolean is not a number (``true`` is not 1), a
    string is not a number or a switch, as the input schema says. The CLI, whose values are all text, reads
    them with the request model's own (lax) parsing instead."""
    return request.model_validate(arguments, strict=True)


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="size_cp",
        command="size-cp",
        title="Size context parallelism",
        description=(
            "CP size and cp_comm_type for a sequence length: the smallest legal power-of-two CP near 4096 "
            "tokens per TP x CP shard (8192 on NVL72). Use first for long context. Returns cp, comm type, "
            "alternatives."
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
            "Checks a TP/CP/PP/VPP/EP/ETP layout on a GPU count under MoE parallel folding, with its pipeline "
            "split and batch. Use on every layout before recommending it. Returns DP, EDP, microbatches, "
            "min_gpus, findings, nearest valid layouts."
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
            "Whether a cuda_graph_impl / cuda_graph_modules setting captures with this config. Use before "
            "enabling CUDA graphs. Returns validity, captured static shapes, what must stay fixed."
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
            "Per-rank GPU memory of a training config for the first, last and most loaded PP stages, by "
            "component. Use on any layout before recommending it. Returns peak_gib, fits, headroom, "
            "breakdown, assumptions."
        ),
        request=EstimateMemoryRequest,
        result=EstimateMemoryResult,
        fn=estimate_memory,
    ),
    Tool(
        name="estimate_throughput",
        command="estimate-throughput",
        title="Estimate step time and throughput",
        description=(
            "Step time, tokens/s and TFLOP/s per GPU of a config, term by term, from the model plan_layout "
            "ranks by. Use to compare a user's layouts. Returns step_s, tokens_per_s with its error range, "
            "tflops_per_gpu, mfu, terms_s."
        ),
        request=EstimateThroughputRequest,
        result=EstimateThroughputResult,
        fn=estimate_throughput,
    ),
    Tool(
        name="pick_recompute",
        command="pick-recompute",
        title="Pick activation recompute",
        description=(
            "The cheapest Megatron Core 0.19 recompute labels that make a config fit with headroom, full "
            "recompute last. Use when a config does not fit. Returns labels, peak before/after, both "
            "dialects, alternatives, next steps."
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
            "Checks a Megatron-LM launch script, Bridge overrides or ConfigContainer object against every rule. "
            "Use on any config a user pastes. Returns findings by flag or key, and a corrected config in both "
            "dialects, itself re-checked."
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
            "Ranked complete plans for a model, GPU count and length, each passing every rule and fitting "
            "with headroom. Use for a layout from scratch. Returns plans (memory, TFLOP/s, both dialects) and "
            "the published layout compared."
        ),
        request=PlanLayoutRequest,
        result=PlanLayoutResult,
        fn=plan_layout,
    ),
)

TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
TOOLS_BY_COMMAND = {tool.command: tool for tool in TOOLS}
