"""Tool calls shared by the in-process, stdio and HTTP server tests: valid ones with their checked values,
and bad ones with the words the error must contain."""

from __future__ import annotations

from moe_long_context.representative import representative_layouts

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
            **only(QWEN3_128K, *LAYOUT_KEYS, "sequence_parallel", "dispatcher", "precision"),
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

# (tool, arguments, words the isError text must contain)
BAD_CALLS = [
    ("size_cp", {"model": "deepseek-v3", "seq_len": -1}, ["seq_len=-1", "greater than or equal to 1"]),
    (
        "size_cp",
        {"model": "dsv4", "seq_len": 8192},
        ["model='dsv4' is not allowed", "did you mean 'deepseek-v3'"],
    ),
    (
        "size_cp",
        {"model": "dsv3", "seq_len": 8192, "sequnce_len": 1},
        ["sequnce_len", "did you mean 'seq_len'"],
    ),
    ("check_dp_budget", {"model": "dsv3"}, ["num_gpus is required"]),
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
]
