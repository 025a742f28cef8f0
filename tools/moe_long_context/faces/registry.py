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
        """Validate ``arguments`` against the request model and run the tool."""
        return self.fn(self.request.model_validate(arguments))


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="size_cp",
        command="size-cp",
        title="Size context parallelism",
        description=(
            "Context-parallel size and cp_comm_type for a model at a sequence length: the smallest power-of-two CP "
            "reaching the tokens-per-(TP x CP)-shard target (4096 on 8-GPU NVLink, 8192 on NVL72) that every "
            "Megatron/TE rule accepts (seq % 2CP, seq % CP*TP with SP, a2a head limits, MLA/sliding-window/sink "
            "comm-type limits, Gated DeltaNet heads). Use it first when planning any long-context run."
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
            "Checks a TP/CP/PP/VPP/EP/ETP layout on a GPU count under MoE parallel folding (TP*CP*DP*PP = world "
            "and ETP*EP*EDP*PP = world, not the product rule), heads and experts against TP and EP, the pipeline "
            "split (layout strings, account-for flags, uneven stages) and GBS/MBS/microbatches. Returns DP, EDP, "
            "microbatches, min_gpus, findings with fixes, and the nearest accepted layouts. Use it on every layout "
            "before recommending it."
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
            "Whether a cuda_graph_impl / cuda_graph_modules setting can capture with this model and config "
            "(Megatron Core 0.19 names): dropless MoE (moe_router + moe_preprocess only; moe needs drop-and-pad), "
            "moe vs moe_router, mlp on all-MoE models, recompute and activation-offload interplay, full_iteration "
            "rules, packed sequences, expandable_segments. Returns the static shapes captured and what must stay "
            "fixed. Use it before enabling CUDA graphs."
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
            "Per-rank GPU memory of a full training configuration for the first, last and most loaded pipeline "
            "stages, by component: BF16 parameters, gradients, optimizer states (distributed optimizer over DP x CP "
            "and EDP, precision-aware optimizer, CPU offload), FP8 weight caches, activations per layer type (GQA, "
            "MLA, Gated DeltaNet, dense MLP, MoE) with recompute and offload, in-flight microbatches under 1F1B and "
            "interleaved 1F1B, MTP, logits, dispatcher buffers, CUDA-graph buffers and a stated overhead. Returns "
            "peak_gib, whether it fits the GPU, and every assumption. Use it on any layout before recommending it."
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
            "Step time, tokens/s and model TFLOP/s per GPU of a full configuration, term by term, with the "
            "step-time model plan_layout ranks by, its assumptions and stated error. Use it on a user's layout."
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
            "The cheapest real Megatron Core 0.19 recompute setting that makes a configuration fit its GPU: "
            "output-discarding layernorm, moe_act, mla_up_proj first, then mlp, shared_experts, moe, full recompute "
            "last (with full_iteration graphs when graphs are on); never core_attn. Every candidate passes the "
            "engine's rule checks. Returns the labels, peak before/after, the Megatron-Bridge keys and Megatron-LM "
            "flags, and when nothing fits the next steps (optimizer CPU offload, more CP/TP, more PP, smaller MBS) "
            "with the GiB each buys."
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
            "Checks a whole configuration as users have it - Megatron-LM launch arguments (a script, with "
            "continuations, comments and VAR=value), Megatron Bridge key=value overrides, or a ConfigContainer-shaped "
            "object - against every rule at once: layout and budget, CP, pipeline split, batch, recompute labels, "
            "CUDA graphs, dispatcher, precision against the GPU, optimizer offload prerequisites. Findings name the "
            "flag or key; unknown Megatron-LM flags are errors, flags the engine does not model are listed as not "
            "checked. Returns a corrected configuration in the same dialect and in the other one. Use it on any "
            "launch script or override list a user pastes."
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
            "From model, GPU, GPU count, sequence length (and optionally global batch, precision, dispatcher) to "
            "ranked complete plans: TP/CP/PP/VPP/EP/ETP/MBS with a pipeline split Megatron accepts, cp_comm_type, "
            "recompute chosen by pick_recompute, optimizer offload if needed, dispatcher and precision, each "
            "passing every engine rule and fitting memory, with estimated memory per stage, model TFLOP/s per GPU "
            "and MFU, the reasons for the ranking, and the Megatron-LM flags and Bridge overrides. Use it when a "
            "user asks for a layout from scratch."
        ),
        request=PlanLayoutRequest,
        result=PlanLayoutResult,
        fn=plan_layout,
    ),
)

TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
TOOLS_BY_COMMAND = {tool.command: tool for tool in TOOLS}
