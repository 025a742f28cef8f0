"""The launch checks of ``lm_args_checks``, part one: Megatron-LM validate_args (core_r0.19.0
megatron/training/arguments.py) up to :1169: the attention backend, the hybrid pattern, the parameter
all-gather overlaps, torch FSDP2 and Megatron-FSDP. Each reads ``Args`` (argparse's values, with validate_args's
rewrites applied where the line it follows reads them); ``lm_args_features`` has the checks after :1169.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..findings import Finding
from .lm_args_checks import Args, _launch
from .table import finding


@_launch
def attention_backend(a: Args) -> Iterator[Finding]:
    """:434-435: --attention-backend local needs --spec local (args.spec[0]; no --spec fails too)."""
    if str(a.attention_backend).split(".")[-1] == "local" and (not a.spec or a.spec[0] != "local"):
        yield finding(
            "LM_ATTENTION_BACKEND_LOCAL",
            f"--attention-backend local with --spec {' '.join(a.spec) if a.spec else '(not given)'}: "
            "Megatron-LM supports the local attention backend only with --spec local.",
            "Drop --attention-backend local (auto picks a Transformer Engine backend), or give --spec local.",
            ["--attention-backend", "--spec"],
        )


@_launch
def hybrid_pattern(a: Args) -> Iterator[Finding]:
    """:720-725 (--hybrid-override-pattern and --hybrid-layer-pattern), :776-786 (a pattern with '|' stage
    boundaries refuses --decoder-first/last-pipeline-num-layers), :817-828 (its segments divide by PP)."""
    if a.hybrid_override_pattern is not None and a.hybrid_layer_pattern is not None:
        yield finding(
            "LM_HYBRID_PATTERN_FLAGS",
            "--hybrid-override-pattern and --hybrid-layer-pattern are both given: Megatron-LM asserts only one "
            "(the first is the deprecated name of the second).",
            "Keep --hybrid-layer-pattern and drop --hybrid-override-pattern.",
            ["--hybrid-override-pattern", "--hybrid-layer-pattern"],
        )
        return
    pattern = a.hybrid_pattern_
    if pattern is None:
        return
    main = pattern.split("/")[0]
    if "|" in main:
        for dest in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
            if getattr(a, dest) is not None:
                yield finding(
                    "LM_HYBRID_PATTERN_FLAGS",
                    f"{a.flag(dest)} with a --hybrid-layer-pattern that has '|' stage boundaries: Megatron-LM "
                    "asserts the pattern alone defines the pipeline stages.",
                    f"Drop {a.flag(dest)}, or remove the '|' boundaries from the pattern.",
                    [a.flag(dest), "--hybrid-layer-pattern"],
                )
                return
    segments, pp = main.count("|") + 1, a.pipeline_model_parallel_size
    if a.given("num_layers_per_virtual_pipeline_stage") or a.given("num_virtual_stages_per_pipeline_rank"):
        return  # :788-797 assert first (HYBRID_VPP_NEEDS_PIPES)
    if (
        a.pipeline_model_parallel_layout is not None
        or a.account_for_embedding_in_pipeline_split
        or (a.account_for_loss_in_pipeline_split)
    ):
        return  # :799-812 assert first (HYBRID_LM_SPLIT_FLAGS)
    if not (segments == 1 and pp > 1) and segments % pp:
        yield finding(
            "LM_HYBRID_PIPE_SEGMENTS",
            f"--hybrid-layer-pattern has {segments} '|' segments, which do not divide over "
            f"--pipeline-model-parallel-size {pp}.",
            f"Write a multiple of {pp} segments (PP x the virtual stages per rank), or no '|' at all.",
            ["--hybrid-layer-pattern", "--pipeline-model-parallel-size"],
        )


@_launch
def param_gather(a: Args) -> Iterator[Finding]:
    """:990-995 (--overlap-param-gather), :1032-1040 (--overlap-param-gather-with-optimizer-step); use_dist_ckpt
    is ckpt_format != 'torch' (update_use_dist_ckpt, :409)."""
    if a.overlap_param_gather:
        if not (a.use_distributed_optimizer or a.use_megatron_fsdp or a.optimizer == "dist_muon"):
            yield finding(
                "LM_OVERLAP_PARAM_GATHER",
                "--overlap-param-gather without --use-distributed-optimizer: Megatron-LM overlaps the parameter "
                "all-gather only with the distributed optimizer, Megatron-FSDP or dist_muon.",
                "Add --use-distributed-optimizer (or drop --overlap-param-gather).",
                ["--overlap-param-gather", "--use-distributed-optimizer"],
            )
            return
        if not a.overlap_grad_reduce:
            yield finding(
                "LM_OVERLAP_PARAM_GATHER",
                "--overlap-param-gather without --overlap-grad-reduce: Megatron-LM asserts both.",
                "Add --overlap-grad-reduce.",
                ["--overlap-param-gather", "--overlap-grad-reduce"],
            )
            return
    if not a.overlap_param_gather_with_optimizer_step:
        return
    for wrong, problem, fix, keys in (
        (not a.use_distributed_optimizer, "needs the distributed optimizer", "Add --use-distributed-optimizer.",
         ["--use-distributed-optimizer"]),
        (not a.overlap_param_gather, "needs --overlap-param-gather", "Add --overlap-param-gather.",
         ["--overlap-param-gather"]),
    ):  # fmt: skip
        if wrong:
            yield finding(
                "LM_PARAM_GATHER_WITH_OPTIMIZER_STEP",
                f"--overlap-param-gather-with-optimizer-step {problem} in Megatron-LM.",
                fix,
                ["--overlap-param-gather-with-optimizer-step", *keys],
            )
            return
    num_layers = a.num_layers if isinstance(a.num_layers, int) else None
    decided, vpp = a.vpp(num_layers)
    if decided and vpp is None:
        yield finding(
            "LM_PARAM_GATHER_WITH_OPTIMIZER_STEP",
            "--overlap-param-gather-with-optimizer-step without virtual pipeline stages: Megatron-LM supports it "
            "only with the interleaved pipeline schedule.",
            "Drop --overlap-param-gather-with-optimizer-step, or use PP > 1 with "
            "--num-virtual-stages-per-pipeline-rank > 1.",
            ["--overlap-param-gather-with-optimizer-step", "--num-virtual-stages-per-pipeline-rank"],
        )
        return
    if decided and a.ckpt_format != "torch":
        yield finding(
            "LM_PARAM_GATHER_WITH_OPTIMIZER_STEP",
            f"--overlap-param-gather-with-optimizer-step with --ckpt-format {a.ckpt_format}: Megatron-LM does not "
            "support it with distributed checkpointing (every format but torch).",
            "Drop --overlap-param-gather-with-optimizer-step, or save with --ckpt-format torch.",
            ["--overlap-param-gather-with-optimizer-step", "--ckpt-format"],
        )


def _env_one(a: Args, var: str = "CUDA_DEVICE_MAX_CONNECTIONS") -> bool:
    value = a.env.get(var)
    if value is not None and "$" in value:
        return False
    return value == "1"


@_launch
def torch_fsdp2(a: Args) -> Iterator[Finding]:
    """:999-1015 (--use-torch-fsdp2) and :1684 (emerging optimizers refuse it)."""
    if not a.use_torch_fsdp2:
        return
    problems = [
        (a.pipeline_model_parallel_size != 1, f"PP {a.pipeline_model_parallel_size} (it needs PP 1)",
         "--pipeline-model-parallel-size"),
        (a.expert_model_parallel_size != 1, f"EP {a.expert_model_parallel_size} (it needs EP 1)",
         "--expert-model-parallel-size"),
        (a.use_distributed_optimizer, "--use-distributed-optimizer", "--use-distributed-optimizer"),
        (a.gradient_accumulation_fusion, "gradient accumulation fusion on (add --no-gradient-accumulation-fusion)",
         "--no-gradient-accumulation-fusion"),
        (a.ckpt_format not in ("torch_dist", "torch_dcp"), f"--ckpt-format {a.ckpt_format}", "--ckpt-format"),
        (a.declares_architecture and not a.untie_embeddings_and_output_weights, "tied embedding and output weights (add "
         "--untie-embeddings-and-output-weights)", "--untie-embeddings-and-output-weights"),
        (a.fp16, "--fp16", "--fp16"),
    ]  # fmt: skip
    wrong = [(what, key) for bad, what, key in problems if bad]
    if wrong:
        yield finding(
            "LM_TORCH_FSDP2",
            f"--use-torch-fsdp2 with {'; '.join(w for w, _ in wrong)}: Megatron-LM asserts against each.",
            "Use Megatron-FSDP (--use-megatron-fsdp), which takes PP, EP and the distributed optimizer, or meet "
            "torch FSDP2's limits.",
            ["--use-torch-fsdp2", *[k for _, k in wrong]],
        )
        return
    if _env_one(a):
        yield finding(
            "LM_FSDP_MAX_CONNECTIONS",
            "--use-torch-fsdp2 with CUDA_DEVICE_MAX_CONNECTIONS=1 exported: Megatron-LM asserts FSDP runs with "
            "more than one connection.",
            "Export CUDA_DEVICE_MAX_CONNECTIONS=8 (or leave it unset) for FSDP.",
            ["--use-torch-fsdp2", "CUDA_DEVICE_MAX_CONNECTIONS"],
        )
        return
    if a.optimizer not in ("sgd", "adam"):
        yield finding(
            "LM_TORCH_FSDP2",
            f"--use-torch-fsdp2 with --optimizer {a.optimizer}: Megatron-LM's emerging optimizers do not support "
            "torch FSDP2.",
            "Use --optimizer adam with torch FSDP2.",
            ["--use-torch-fsdp2", "--optimizer"],
        )


@_launch
def megatron_fsdp(a: Args) -> Iterator[Finding]:
    """:1118-1163 (--use-megatron-fsdp), :1166-1169 (--fsdp-manual-registration), :1685 (emerging optimizers)."""
    if a.use_megatron_fsdp:
        if a.moe_single_grouped_weight or a.moe_single_grouped_bias:
            which = [f for f in ("--moe-single-grouped-weight", "--moe-single-grouped-bias") if f in a.values]
            yield finding(
                "LM_MEGATRON_FSDP",
                f"--use-megatron-fsdp with {' and '.join(which)}: Megatron-FSDP does not support single grouped "
                "MoE parameters (ValueError).",
                f"Drop {' and '.join(which)}, or use the distributed optimizer without FSDP.",
                ["--use-megatron-fsdp", *which],
            )
            return
        if a.optimizer not in ("sgd", "adam"):
            yield finding(
                "LM_MEGATRON_FSDP",
                f"--use-megatron-fsdp with --optimizer {a.optimizer}: Megatron-FSDP supports only adam and sgd.",
                "Use --optimizer adam with Megatron-FSDP.",
                ["--use-megatron-fsdp", "--optimizer"],
            )
            return
        if (
            a.data_parallel_sharding_strategy == "optim_grads_params"
            and a.check_weight_hash_across_dp_replicas_interval is not None
        ):
            yield finding(
                "LM_MEGATRON_FSDP",
                "--check-weight-hash-across-dp-replicas-interval with Megatron-FSDP's optim_grads_params sharding "
                "(the default --data-parallel-sharding-strategy): the weights are not replicated to compare.",
                "Drop --check-weight-hash-across-dp-replicas-interval.",
                ["--use-megatron-fsdp", "--check-weight-hash-across-dp-replicas-interval"],
            )
            return
        if _env_one(a):
            yield finding(
                "LM_FSDP_MAX_CONNECTIONS",
                "--use-megatron-fsdp with CUDA_DEVICE_MAX_CONNECTIONS=1 exported: Megatron-LM asserts FSDP runs "
                "with more than one connection.",
                "Export CUDA_DEVICE_MAX_CONNECTIONS=8 (or leave it unset) for FSDP.",
                ["--use-megatron-fsdp", "CUDA_DEVICE_MAX_CONNECTIONS"],
            )
            return
        if a.ckpt_format != "fsdp_dtensor":
            yield finding(
                "LM_MEGATRON_FSDP",
                f"--use-megatron-fsdp with --ckpt-format {a.ckpt_format}"
                f"{'' if a.given('ckpt_format') else ' (the default)'}: Megatron-LM asserts the fsdp_dtensor "
                "checkpoint format for Megatron-FSDP.",
                "Add --ckpt-format fsdp_dtensor.",
                ["--use-megatron-fsdp", "--ckpt-format"],
            )
            return
        if a.init_model_with_meta_device and a.data_parallel_sharding_strategy == "no_shard":
            yield finding(
                "LM_MEGATRON_FSDP",
                "--init-model-with-meta-device with --data-parallel-sharding-strategy no_shard: Megatron-LM "
                "refuses meta-device initialization without sharding (ValueError).",
                "Drop --init-model-with-meta-device, or shard (optim_grads_params).",
                ["--init-model-with-meta-device", "--data-parallel-sharding-strategy"],
            )
            return
    if a.fsdp_manual_registration and not (a.use_megatron_fsdp and a.nccl_ub):
        missing = [f for f, on in (("--use-megatron-fsdp", a.use_megatron_fsdp), ("--use-nccl-ub", a.nccl_ub))
                   if not on]  # fmt: skip
        yield finding(
            "LM_FSDP_MANUAL_REGISTRATION",
            f"--fsdp-manual-registration without {' and '.join(missing)}: Megatron-LM registers FSDP buffers "
            "manually only for Megatron-FSDP with NCCL user buffers.",
            f"Add {' and '.join(missing)}, or drop --fsdp-manual-registration.",
            ["--fsdp-manual-registration", *missing],
        )
        return
