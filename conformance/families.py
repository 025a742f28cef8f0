"""Which engine rule family a Megatron exception belongs to.

Each entry matches Megatron's message or, for bare ``assert`` statements that carry no message, the
source line that raised (the oracle records both). The first match wins; an exception that matches
nothing is reported as family ``unclassified`` and fails the run, so a new Megatron message cannot
slip through as an agreement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    family: str
    regex: str
    what: str  # where Megatron raises it


PATTERNS: tuple[Pattern, ...] = (
    # Front-end checks of Megatron-LM's validate_args (engine family launch).
    Pattern(
        "launch",
        r"Transformer Engine cross entropy loss fusion is disabled",
        "LM arguments.py:1642-1647",
    ),
    Pattern(
        "launch",
        r"Tensor parallel communication/GEMM overlap can happen only when sequence parallelism",
        "LM arguments.py:1401-1402",
    ),
    # Messages that name another family's words come first.
    Pattern(
        "recompute",
        r"recompute.*when enabling overlap_moe_expert_parallel_comm",
        "MCore transformer_config.py:2686-2702",
    ),
    Pattern(
        "graphs",
        r"CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm",
        "MCore transformer_config.py:2738-2746",
    ),
    Pattern(
        "moe", r"EP A2A overlap|overlap_moe_expert_parallel_comm", "MCore transformer_config.py:2669-2736"
    ),
    Pattern(
        "optimizer",
        r"optimizer cpu offload must be used in conjunction with",
        "LM arguments.py:1808-1811",
    ),
    # ---- layout: world factorisation, heads, experts, sequence parallelism
    Pattern("layout", r"world_size \(\d+\) is not divisible by \d+", "MCore parallel_state.py:815-826"),
    Pattern("layout", r"world size \(\d+\) is not divisible by total_model_size", "LM arguments.py:422-446"),
    Pattern(
        "layout",
        r"is not divisible by expert_tensor_model_pipeline_parallel size",
        "MCore parallel_state.py:879-884",
    ),
    Pattern(
        "layout", r"num_attention_heads \(\d+\) must be a multiple of", "MCore transformer_config.py:1323"
    ),
    Pattern(
        "layout",
        r"num_query_groups \(\d+\) must be a multiple or divisor",
        "MCore transformer_config.py:1339",
    ),
    Pattern(
        "layout", r"Number of experts should be a multiple of expert model parallel", "LM arguments.py:1600"
    ),
    Pattern("layout", r"num_moe_experts % ep_size == 0", "MCore moe_layer.py:183 (bare assert at build)"),
    Pattern("layout", r"Bias in Moe is only supported when ETP==1", "MCore transformer_config.py:2280"),
    Pattern(
        "layout", r"linear_num_(key|value)_heads.*must be a multiple of", "MCore transformer_config.py:1373"
    ),
    Pattern(
        "layout",
        r"Cannot use sequence parallelism without tensor parallelism",
        "MCore model_parallel_config.py:502",
    ),
    # ---- pipeline
    Pattern("pipeline", r"pipeline-model-parallel size should be greater than", "LM arguments.py:966-975"),
    Pattern(
        "pipeline",
        r"virtual_pipeline_model_parallel_size.*pipeline_model_parallel_size|"
        r"pipeline-model-parallel size should be greater than 1",
        "MCore parallel_state.py:827-831",
    ),
    Pattern(
        "pipeline",
        r"Number of layers should be divisible by the pipeline-model-parallel size|"
        r"number of layers of the model must be divisible pipeline model parallel size",
        "LM arguments.py:918-964",
    ),
    Pattern(
        "pipeline",
        r"should be divisible by config.pipeline_model_parallel_size",
        "MCore transformer_block.py:150",
    ),
    Pattern(
        "pipeline",
        r"num_layers_per_pipeline_rank .* should be divisible by vp_size",
        "MCore transformer_block.py:168",
    ),
    Pattern(
        "pipeline",
        r"number of layers per pipeline stage must be divisible number of layers per virtual",
        "LM arguments.py:930-935",
    ),
    Pattern("pipeline", r"No more than one of the following arguments can be set", "LM arguments.py:893-905"),
    Pattern(
        "pipeline",
        r"Number of decoder layers \d+ ?must match num_layers|The first layer must be|The last layer must be|"
        r"number of middle layers|number of layers at middle stage|must be divisible by (the )?middle|"
        r"pipeline_model_parallel_layout|length of pipeline_model_parallel_layout|"
        r"layout|The number of stages",
        "MCore transformer_config.py:1935-1986, pipeline_parallel_layer_layout.py",
    ),
    Pattern(
        "pipeline",
        r"num_layers_in_(first|last)_pipeline_stage|uneven pipeline|Uneven|left over layers",
        "MCore transformer_config.py:1923-2062",
    ),
    Pattern(
        "pipeline",
        r"account_for_(embedding|loss)_in_pipeline_split|Not enough layers in the (first|last)",
        "MCore transformer_config.py:2064-2110",
    ),
    # ---- batch
    Pattern(
        "batch",
        r"global batch size \(\d+\) is not divisible by micro batch size|"
        r"eval_global_batch_size \(\d+\) must be divisible",
        "MCore num_microbatches_calculator.py:357-392; LM arguments.py:690-696",
    ),
    # ---- sequence and context parallelism
    Pattern(
        "sequence", r"seq-length should be a multiple of 2 \* context-parallel-size", "LM arguments.py:1295"
    ),
    Pattern(
        "cp", r"hierarchical-context-parallel-sizes must be set when a2a\+p2p", "LM arguments.py:565-567"
    ),
    Pattern(
        "cp",
        r"context_parallel_size == prod\(args.hierarchical_context_parallel_sizes\)|"
        r"hierarchical_context_parallel_sizes",
        "LM arguments.py:562-564; MCore parallel_state.py:1128",
    ),
    # ---- CUDA graphs
    Pattern(
        "graphs",
        r"cuda-graph-modules must be empty when --cuda-graph-impl=full_iteration",
        "LM arguments.py:1888",
    ),
    Pattern("graphs", r"no-check-for-nan-in-loss-and-grad should be set", "LM arguments.py:1194-1197"),
    Pattern(
        "graphs",
        r"cuda_graph_impl=\"local\" only for|cuda_graph_impl=.local. only",
        "Bridge utils/cuda_graph.py:134",
    ),
    Pattern("graphs", r"NCCL_GRAPH_REGISTER", "LM arguments.py:1880-1887"),
    Pattern(
        "graphs", r"[Cc]uda graph|cuda_graph|CUDA graph|cudagraph", "MCore transformer_config.py:2445-2649"
    ),
    # ---- recompute
    Pattern("recompute", r"recompute method is not yet supported for selective", "LM arguments.py:1386-1389"),
    Pattern(
        "recompute",
        r"recompute_method|recompute_num_layers|recompute_granularity|recompute_modules|"
        r"[Rr]ecompute|moe_act recompute",
        "MCore transformer_config.py:1724-1890",
    ),
    # ---- MoE dispatcher and capacity
    Pattern(
        "moe",
        r"DeepEP is supported for|HybridEP is supported for|NCCL EP is supported for",
        "Bridge flex_dispatcher_backend.py:102-124",
    ),
    Pattern(
        "moe",
        r"moe_pad_expert_input_to_capacity|moe_expert_capacity_factor",
        "MCore transformer_config.py:1600-1692",
    ),
    Pattern("moe", r"variable_seq_lengths|variable sequence length", "MCore transformer_config.py:2644-2649"),
    Pattern("moe", r"moe_router_padding_for_(quantization|fp8)", "MCore transformer_config.py:2310-2326"),
    Pattern("moe", r"moe_shared_expert_overlap", "MCore transformer_config.py:1645-1652"),
    Pattern(
        "moe",
        r"overlap_moe_expert_parallel_comm|expert parallel comm",
        "MCore transformer_config.py:2669-2736",
    ),
    Pattern("moe", r"flex|deepep|dispatcher", "MCore transformer_config.py:1588-1615"),
    # ---- precision
    Pattern("precision", r"fp8[-_]param[-_]gather|fp8_param", "LM arguments.py:1061-1063"),
    Pattern("precision", r"fp8|fp4|FP8|FP4", "MCore transformer_config.py:1400-1584"),
    # ---- optimizer
    Pattern(
        "optimizer", r"precision.aware|use_precision_aware_optimizer", "MCore optimizer_config.py:395-486"
    ),
    Pattern("optimizer", r"optimizer.cpu.offload|offload", "LM arguments.py:1802-1811"),
)

_COMPILED = [(p, re.compile(p.regex)) for p in PATTERNS]


def classify(message: str, line: str = "") -> str:
    """The engine rule family of a Megatron exception, or 'unclassified'."""
    for pattern, regex in _COMPILED:
        if regex.search(message) or (not message and regex.search(line)):
            return pattern.family
    return "unclassified"
