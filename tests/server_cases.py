"""Tool calls shared by the in-process, stdio and HTTP server tests: valid ones with their checked values,
and bad ones with the words the error must contain."""

from __future__ import annotations

from moe_long_context.engine.representative import representative_layouts

DSV3_128K = next(lay for lay in representative_layouts() if lay.id == "deepseek-v3-128k-h100").config
QWEN3_128K = next(lay for lay in representative_layouts() if lay.id == "qwen3-235b-a22b-128k-gb200").config


def only(config: dict, *keys: str) -> dict:
    return {k: config[k] for k in keys if k in config}


LAYOUT_KEYS = (
    "model",
    "gpu",
    "num_gpus",
    "seq_len",
    "tp",
    "cp",
    "ep",
    "pp",
    "vpp",
    "pipeline_layout",
    "mbs",
    "gbs",
)

# the split the layout needs: every tool that receives PP checks that the layers split over it
SPLIT_KEYS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")

# (tool, arguments, expected values in structuredContent)
VALID_CALLS = [
    (
        "size_cp",
        {"model": "deepseek-v3", "gpu": "h100", "seq_len": 131072},
        {"cp": 32, "tokens_per_rank": 4096, "tokens_per_shard": 4096},
    ),
    (
        "check_dp_budget",
        only(DSV3_128K, *LAYOUT_KEYS),
        {"valid": True, "dp": 1, "edp": 1, "num_microbatches": 64, "min_gpus": 256, "vpp": 4},
    ),
    (
        "validate_cuda_graph_shapes",
        {
            **only(QWEN3_128K, *LAYOUT_KEYS, *SPLIT_KEYS, "sequence_parallel", "dispatcher", "precision"),
            **only(
                QWEN3_128K,
                "recompute_granularity",
                "recompute_modules",
                "cuda_graph_impl",
                "cuda_graph_modules",
            ),
        },
        {
            "valid": True,
            "microbatches_captured": 32,
            "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"],
        },
    ),
]

DSV3_NO_RECOMPUTE = {
    k: v
    for k, v in DSV3_128K.items()
    if k not in ("recompute_granularity", "recompute_modules", "optimizer_cpu_offload_fraction")
}
QWEN3_OVERRIDES = [
    "model.tensor_model_parallel_size=4",
    "model.context_parallel_size=4",
    "model.expert_model_parallel_size=32",
    "model.pipeline_model_parallel_size=4",
    "model.virtual_pipeline_model_parallel_size=12",
    "model.account_for_embedding_in_pipeline_split=true",
    "model.account_for_loss_in_pipeline_split=true",
    "model.sequence_parallel=true",
    "model.seq_length=131072",
    "train.global_batch_size=64",
    "mixed_precision=bf16_with_mxfp8_mixed",
    "model.recompute_modules=[moe_act,norm]",
    "model.recompute_granularity=selective",
]
VALID_CALLS += [
    # the seed layout with its published recompute and offload: 60.194 GiB of 79.11 (tests/test_memory_*.py)
    ("estimate_memory", DSV3_128K, {"valid": True, "fits": True, "peak_gib": 60.194, "usable_gib": 79.11}),
    # the seed at 64 microbatches: 123.24 s a step, 326.5 model TFLOP/s per GPU (16.50 % of the FP8 peak)
    (
        "estimate_throughput",
        DSV3_128K,
        {
            "valid": True,
            "step_s": 123.2354,
            "tokens_per_step": 8388608,
            "tflops_per_gpu": 326.5,
            "mfu": 0.165,
        },
    ),
    # without recompute and offload it needs 168.8 GiB; no selective set leaves the 5 % headroom, full recompute does (69.0)
    (
        "pick_recompute",
        DSV3_NO_RECOMPUTE,
        {
            "fits": True,
            "recompute_granularity": "full",
            "recompute_modules": [],
            "peak_gib_before": 168.762,
            "peak_gib_after": 68.953,
            "budget_gib": 75.154,
        },
    ),
    # the informal label 'norm' is an error Megatron raises; the corrected overrides say layernorm
    (
        "lint_config",
        {"bridge_overrides": QWEN3_OVERRIDES, "model": "qwen3-235b-a22b", "gpu": "gb200", "num_gpus": 128},
        {"valid": False, "model": "qwen3-235b-a22b", "remaining_errors": [], "dialect": "bridge"},
    ),
    (
        "plan_layout",
        {"model": "qwen3-30b-a3b", "gpu": "h100", "num_gpus": 16, "seq_len": 32768, "top_n": 1},
        {"evaluated": 1, "feasible": 1, "gbs": 256, "valid": True},
    ),
    # LoRA rank 32 on Bridge's four targets: 30,277,632 adapter parameters (tests/test_lora_requests.py)
    (
        "estimate_memory",
        {"model": "qwen3-30b-a3b", "gpu": "h100", "num_gpus": 8, "seq_len": 4096, "ep": 8, "lora_dim": 32},
        {"valid": True, "fits": True, "peak_gib": 46.948},
    ),
]

# (tool, arguments, words the isError text must contain)
BAD_CALLS = [
    ("size_cp", {"model": "deepseek-v3", "seq_len": -1}, ["seq_len=-1", "greater than or equal to 1"]),
    (
        "size_cp",
        {"model": "dsv4", "seq_len": 8192},
        ["model='dsv4' is not allowed", "DeepSeek-V4 cannot run on Megatron Core 0.19.2"],
    ),
    (
        "size_cp",
        {"model": "dsv3", "seq_len": 8192, "sequnce_len": 1},
        ["sequnce_len", "did you mean 'seq_len'"],
    ),
    ("check_dp_budget", {"model": "dsv3"}, ["num_gpus is required"]),
    (
        "estimate_memory",
        {"model": "qwen3-30b-a3b", "gpu": "h100", "num_gpus": 8, "seq_len": 4096, "lora_target_modules": [1]},
        ["lora_target_modules", "must be module names"],
    ),
    (
        "check_dp_budget",
        {"model": "dsv3", "num_gpus": 8, "gpu": "a100"},
        ["gpu='a100' is not allowed", "h100"],
    ),
    ("check_dp_budget", {"model": "dsv3", "num_gpus": 8, "tp": "two"}, ["tp='two' is not allowed"]),
    (
        "validate_cuda_graph_shapes",
        {"model": "dsv3", "seq_len": 8192, "cuda_graph_impl": "cudnn"},
        ["cuda_graph_impl='cudnn' is not allowed", "transformer_engine"],
    ),
    # input that is not a launch: an isError naming what is wrong, in one line
    ("lint_config", {"megatron_args": "", "model": "dsv3", "num_gpus": 8}, ["megatron_args is empty"]),
    (
        "lint_config",
        {"megatron_args": "Lorem ipsum", "model": "dsv3", "num_gpus": 8},
        ["no Megatron-LM flag"],
    ),
    (
        "lint_config",
        {"megatron_args": "/nonexistent/launch.sh", "model": "dsv3", "num_gpus": 8},
        ["looks like a file path"],
    ),
    (
        "lint_config",
        {"megatron_args": "--tensor-model-parallel-size two", "model": "dsv3", "num_gpus": 8},
        ["--tensor-model-parallel-size 'two' is not an integer"],
    ),
    (
        "lint_config",
        {"bridge_overrides": ["model.context_parallel_size=2,4"], "model": "dsv3", "num_gpus": 8},
        ["model.context_parallel_size=2,4", "Hydra sweep"],
    ),
]
