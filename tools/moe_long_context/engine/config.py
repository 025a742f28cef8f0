"""The shared argument set: one documented declaration of every knob the tools understand.

Each group is a small pydantic model; a tool's request model is a composition of the groups it needs,
and ``TrainingConfig`` is all of them. The MCP server and the CLI derive their arguments from these
declarations, so names, types, bounds and help texts cannot drift apart. Defaults are what Megatron
Bridge recipes for MoE use unless a field says otherwise; Megatron's own flag names are in each
description so a user can map them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..model.lora import LORA_TARGETS

# w3-b: the settings only Megatron Core's TransformerConfig / ModelParallelConfig checks read (TrainingConfig
# carries them, the request models do not)
from .config_mcore import TransformerConfigArgs
from .config_peft import PeftArgs
from .findings import NotChecked

MAX_GPUS = 65536
MAX_SEQ_LEN = 16 * 1024 * 1024

Dispatcher = Literal["alltoall", "allgather", "flex-deepep", "flex-hybridep", "flex-ncclep"]
Precision = Literal["bf16", "fp8-delayed", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4"]
CpCommType = Literal["p2p", "a2a", "a2a+p2p", "all_gather"]
CudaGraphImpl = Literal["none", "local", "transformer_engine", "full_iteration"]
CudaGraphModule = Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"]
RecomputeGranularity = Literal["selective", "full"]
CrossEntropyFusion = Literal["none", "native", "te"]
RecomputeMethod = Literal["uniform", "block"]
OffloadModule = Literal[
    "attn_norm",
    "qkv_linear",
    "core_attn",
    "attn_proj",
    "mlp_norm",
    "expert_fc1",
    "moe_act",
    "fused_group_mlp",
]

# Every label Megatron Core 0.19 accepts in --recompute-modules (transformer_config.py, selective checks).
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
    "gdn_norm_out",
)


def _split_list(value: Any) -> Any:
    """Accept 'a,b', 'a b' and '[a, b]' (or a JSON list, '["a", "b"]') as well as lists, so the CLI and agents
    can pass any."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        return [v.strip("'\"") for v in text.replace(",", " ").split() if v.strip("'\"")]
    return value


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelArgs(_Args):
    model: str | dict[str, Any] = Field(
        description="Catalog model id (deepseek-v3, glm-4.5, qwen3.5-397b-a17b, ...; `moe-lc models` lists them and "
        "aliases like dsv3 work), an inline Hugging Face config.json object or a config.json path of a supported "
        "family (references/families.md lists them), or a path to a YAML file of ModelSpec fields."
    )
    mtp_num_layers: int | None = Field(
        default=None,
        ge=0,
        le=16,
        description="Multi-token-prediction layers (--mtp-num-layers). Default: the model's own (DeepSeek-V3: 1).",
    )


class LauncherArgs(_Args):
    launcher: Literal["bridge", "megatron-lm"] = Field(
        default="bridge",
        description="Front end that launches the job: bridge (Megatron Bridge recipes and overrides) or "
        "megatron-lm (pretrain_gpt.py flags). A few checks exist only in Megatron-LM's validate_args.",
    )


class GpuArgs(_Args):
    gpu: str | None = Field(
        default=None,
        description="GPU catalog id: h100, h200, b200, b300, gb200, gb300. Needed for NVLink-domain, "
        "precision and dispatcher checks and for memory fit.",
    )


class ClusterArgs(GpuArgs):
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="World size: total GPUs in the job.")


class SequenceArgs(_Args):
    seq_len: int | None = Field(
        default=None, ge=1, le=MAX_SEQ_LEN, description="Training sequence length in tokens (--seq-length)."
    )


class ParallelArgs(_Args):
    tp: int = Field(
        default=1, ge=1, le=MAX_GPUS, description="Tensor parallel size (--tensor-model-parallel-size)."
    )
    cp: int = Field(
        default=1, ge=1, le=MAX_GPUS, description="Context parallel size (--context-parallel-size)."
    )
    pp: int = Field(
        default=1, ge=1, le=MAX_GPUS, description="Pipeline parallel size (--pipeline-model-parallel-size)."
    )
    vpp: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Virtual pipeline stages per PP rank (--num-virtual-stages-per-pipeline-rank). "
        "Derived from pipeline_layout when that is given.",
    )
    ep: int = Field(
        default=1, ge=1, le=MAX_GPUS, description="Expert parallel size (--expert-model-parallel-size)."
    )
    etp: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS,
        description="Expert tensor parallel size (--expert-tensor-parallel-size). Unset: Megatron Bridge uses 1 "
        "when EP > 1 (Megatron Core alone would use TP).",
    )
    sequence_parallel: bool | None = Field(
        default=None,
        description="Sequence parallelism (--sequence-parallel). Unset: assumed on exactly when TP > 1, which "
        "MoE with TP > 1 requires.",
    )
    tp_comm_overlap: bool = Field(
        default=False,
        description="TP communication/GEMM overlap (--tp-comm-overlap; Bridge comm_overlap.tp_comm_overlap). "
        "Megatron-LM refuses it without sequence parallelism (and so at TP = 1); Bridge turns it off there.",
    )


class PipelineSplitArgs(_Args):
    pipeline_layout: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Explicit --pipeline-model-parallel-layout, e.g. 'Et|(tt|)*30mL': E embedding, t decoder "
        "layer, m MTP layer, L loss, '|' between virtual stages, (..)*n and x*n repeat.",
    )
    account_for_embedding_in_pipeline_split: bool = Field(
        default=False,
        description="Count the embedding as a layer when splitting (--account-for-embedding-...).",
    )
    account_for_loss_in_pipeline_split: bool = Field(
        default=False, description="Count the loss as a layer when splitting (--account-for-loss-...)."
    )
    num_layers_in_first_pipeline_stage: int | None = Field(
        default=None, ge=1, le=100000, description="Decoder layers on the first PP stage (uneven split)."
    )
    num_layers_in_last_pipeline_stage: int | None = Field(
        default=None, ge=1, le=100000, description="Decoder layers on the last PP stage (uneven split)."
    )


class BatchArgs(_Args):
    mbs: int = Field(default=1, ge=1, le=4096, description="Micro batch size (--micro-batch-size).")
    gbs: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQ_LEN,
        description="Global batch size (--global-batch-size). Unset: Megatron uses MBS x DP (one microbatch).",
    )


class ContextParallelArgs(_Args):
    cp_comm_type: CpCommType | None = Field(
        default=None,
        description="--cp-comm-type: p2p (ring), a2a (Ulysses), a2a+p2p (hierarchical), all_gather.",
    )
    hierarchical_cp_sizes: list[Annotated[int, Field(ge=1, le=MAX_GPUS)]] | None = Field(
        default=None,
        min_length=1,
        max_length=8,
        description="--hierarchical-context-parallel-sizes for a2a+p2p, e.g. [8, 4] (a2a level, p2p level).",
    )

    @field_validator("hierarchical_cp_sizes", mode="before")
    @classmethod
    def _split_hierarchy(cls, v: Any) -> Any:
        v = _split_list(v)
        return [int(x) if isinstance(x, str) and x.isdigit() else x for x in v] if isinstance(v, list) else v


class MoEArgs(_Args):
    dispatcher: Dispatcher = Field(
        default="alltoall",
        description="Token dispatcher: alltoall, allgather (--moe-token-dispatcher-type) or flex with a backend: "
        "flex-deepep, flex-hybridep, flex-ncclep (--moe-flex-dispatcher-backend).",
    )
    moe_capacity_factor: float | None = Field(
        allow_inf_nan=False,
        default=None,
        ge=-1,
        le=1000,
        description="--moe-expert-capacity-factor; unset means dropless MoE (negative also means unset).",
    )
    moe_pad_expert_input_to_capacity: bool = Field(
        default=False,
        description="--moe-pad-expert-input-to-capacity (drop-and-pad MoE; needs a capacity factor).",
    )
    moe_grouped_gemm: bool = Field(
        default=True, description="--moe-grouped-gemm (Bridge MoE recipes enable it)."
    )
    moe_shared_expert_overlap: bool = Field(default=False, description="--moe-shared-expert-overlap.")
    moe_router_padding_for_quantization: bool = Field(
        default=False,
        description="--moe-router-padding-for-quantization (pads routing maps for FP8/FP4 GEMMs).",
    )
    ep_overlap: bool = Field(
        default=False, description="EP all-to-all overlap (--overlap-moe-expert-parallel-comm)."
    )
    delay_wgrad_compute: bool = Field(
        default=False,
        description="Delay the expert weight-gradient GEMMs to overlap them with the EP all-to-all "
        "(--delay-wgrad-compute; Bridge comm_overlap.delay_wgrad_compute); needs ep_overlap.",
    )


class PrecisionArgs(_Args):
    precision: Precision = Field(
        default="bf16",
        description="bf16, fp8-delayed, fp8-tensorwise, fp8-blockwise (--fp8-format e4m3/hybrid --fp8-recipe ...), "
        "mxfp8 (--fp8-recipe mxfp8) or nvfp4 (--fp4-format e2m1 --fp4-recipe nvfp4).",
    )
    fp8_param_gather: bool = Field(
        default=False, description="--fp8-param-gather (FP8 parameters all-gather)."
    )
    reuse_grad_buf_for_mxfp8_param_ag: bool = Field(
        default=True,
        description="Reuse the gradient buffer for the MXFP8 parameter all-gather "
        "(--reuse-grad-buf-for-mxfp8-param-ag); Bridge's bf16_with_mxfp8_mixed preset turns it on.",
    )


class RecomputeArgs(_Args):
    recompute_granularity: RecomputeGranularity | None = Field(
        default=None, description="--recompute-granularity: selective or full; unset means no recompute."
    )
    recompute_modules: list[str] | None = Field(
        default=None,
        max_length=16,
        description="--recompute-modules for selective recompute. Megatron Core 0.19 labels: "
        + ", ".join(RECOMPUTE_MODULES)
        + ". Unset with selective: Megatron uses [core_attn].",
    )
    recompute_method: RecomputeMethod | None = Field(
        default=None, description="--recompute-method for full recompute: uniform or block."
    )
    recompute_num_layers: int | None = Field(
        default=None, ge=1, le=100000, description="--recompute-num-layers for full recompute."
    )
    activation_offload: list[OffloadModule] | None = Field(
        default=None,
        max_length=8,
        description="Fine-grained activation offload modules (--fine-grained-activation-offloading "
        "--offload-modules ...): attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, "
        "fused_group_mlp.",
    )

    nvte_cpu_offload_v1: bool | None = Field(
        default=None,
        description="NVTE_CPU_OFFLOAD_V1=1 is exported, which fine-grained activation offload needs with "
        "TE >= 2.10. Unset: not known (the engine reminds you); false: the launch does not export it.",
    )

    @field_validator("recompute_modules", "activation_offload", mode="before")
    @classmethod
    def _split_recompute_lists(cls, v: Any) -> Any:
        return _split_list(v)


class CudaGraphArgs(_Args):
    cuda_graph_impl: CudaGraphImpl = Field(
        default="none", description="--cuda-graph-impl: none, local, transformer_engine or full_iteration."
    )
    cuda_graph_modules: list[str] | None = Field(
        default=None,
        max_length=6,
        description="--cuda-graph-modules (Megatron Core 0.19 name; replaces --cuda-graph-scope): attn, mlp, moe, "
        "moe_router, moe_preprocess, mamba. Empty or unset with a per-layer impl: the whole layer.",
    )
    check_for_nan_in_loss: bool = Field(
        default=True,
        description="--check-for-nan-in-loss-and-grad (Megatron default on); full_iteration graphs need it off.",
    )
    expandable_segments: bool = Field(
        default=False, description="PYTORCH_CUDA_ALLOC_CONF contains expandable_segments:True."
    )
    nccl_graph_register: bool = Field(
        default=True,
        description="NCCL graph registration on (False means NCCL_GRAPH_REGISTER=0 is exported).",
    )

    @field_validator("cuda_graph_modules", mode="before")
    @classmethod
    def _split_graph_modules(cls, v: Any) -> Any:
        return _split_list(v)


class DataArgs(_Args):
    packed_sequences: bool = Field(
        default=False, description="Packed (THD) sequences, e.g. Bridge offline packing for SFT."
    )
    pad_to_max_length: bool = Field(
        default=False, description="Dataset pads every (packed) sample to seq_len (static shapes)."
    )
    pad_cu_seqlens: bool = Field(
        default=False,
        description="Packing pads cu_seqlens to a fixed length (packed_sequence_specs.pad_cu_seqlens).",
    )
    variable_seq_lengths: bool = Field(
        default=False, description="Microbatches of varying length (--variable-seq-lengths)."
    )


class FsdpArgs(_Args):
    use_megatron_fsdp: bool = Field(
        default=False, description="Megatron-FSDP, optim_grads_params (--use-megatron-fsdp)."
    )


class OptimizerArgs(FsdpArgs):
    use_distributed_optimizer: bool = Field(default=True, description="--use-distributed-optimizer.")
    use_precision_aware_optimizer: bool = Field(
        default=False,
        description="--use-precision-aware-optimizer (BF16 Adam moments; needed for CPU offload).",
    )
    optimizer_cpu_offload: bool = Field(
        default=False,
        description="Optimizer CPU offload requested (--optimizer-cpu-offload; Bridge "
        "optimizer.optimizer_cpu_offload). What moves is optimizer_cpu_offload_fraction: Megatron Core's "
        "default fraction is 0.0 (Bridge), Megatron-LM's flag default 1.0.",
    )
    optimizer_cpu_offload_fraction: float = Field(
        allow_inf_nan=False,
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of optimizer state offloaded to the CPU (--optimizer-cpu-offload "
        "--optimizer-offload-fraction F); 0 means no offload.",
    )
    grad_reduce_in_fp32: bool = Field(
        default=True,
        description="FP32 main-gradient buffer (Bridge ddp.grad_reduce_in_fp32; Megatron-LM's default with "
        "--bf16). False keeps BF16 gradients (--grad-reduce-in-bf16), as Bridge's DeepSeek-V3 recipes do.",
    )


class MemoryArgs(_Args):
    overhead_gib: float | None = Field(
        allow_inf_nan=False,
        default=None,
        ge=0.0,
        le=1024.0,
        description="Memory outside PyTorch's allocated tensors, in GiB: CUDA context, NCCL and library "
        "workspaces, allocator fragmentation. Unset: the allocator cache and outside memory measured by the calibration.",
    )
    cross_entropy_fusion: CrossEntropyFusion = Field(
        default="native",
        description="Loss kernel: none (Megatron-LM default), native (--cross-entropy-loss-fusion; Bridge's "
        "default) or te (--cross-entropy-fusion-impl te, Bridge's DeepSeek-V3 recipes). native and none keep "
        "FP32 softmax logits per in-flight microbatch; te keeps the BF16 gradient in place. Megatron-LM refuses "
        "te (--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te).",
    )


class LoraRequestArgs(_Args):
    """LoRA as the estimating and planning tools take it: Bridge's ``LoRA`` with rank ``lora_dim``."""

    lora_dim: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="LoRA rank (Bridge peft.dim): the base weights frozen, rank-lora_dim adapters trained on "
        "lora_target_modules. Unset: full training.",
    )
    lora_target_modules: tuple[str, ...] | None = Field(
        default=None,
        description="Linears LoRA wraps (Bridge peft.target_modules). The engine places linear_qkv, linear_proj, "
        "linear_fc1, linear_fc2, in_proj and out_proj; other names are listed under not_checked. Unset: Bridge's "
        "default, the first four; Bridge's Nemotron-H PEFT recipes add in_proj and out_proj.",
    )

    @field_validator("lora_target_modules", mode="before")
    @classmethod
    def _module_names(cls, value):
        """Any names, as Bridge takes any (it warns when one matches no module, peft/module_matcher.py:195-209);
        the ones the engine cannot place are listed under not_checked, not refused."""
        value = _split_list(value)
        if value is None:
            return None
        if not isinstance(value, list | tuple) or not all(isinstance(n, str) for n in value):
            raise ValueError(
                f"lora_target_modules must be module names (a list of them, or 'a,b'), not {value!r}"
            )
        return tuple(dict.fromkeys(value))

    def lora_not_checked(self) -> list[NotChecked]:
        """The targets the engine cannot place, as lint reports them for a launch."""
        if self.lora_dim is None or self.lora_target_modules is None:
            return []
        known = [n for n in self.lora_target_modules if n in LORA_TARGETS]
        other = [n for n in self.lora_target_modules if n not in LORA_TARGETS] or [
            "empty, so Bridge's matcher takes every nn.Linear"
        ]
        if known and len(known) == len(self.lora_target_modules):
            return []
        verdict = (
            "not a modelled module name; Bridge warns at build when an entry matches no module and trains no "
            "adapter for it"
            if known
            else "no modelled module name: LoRA is not read, and memory and time are those of full training"
        )
        return [
            NotChecked(
                keys=["lora_target_modules"],
                requires=f"{', '.join(other)}: {verdict} (modelled: {', '.join(LORA_TARGETS)})",
            )
        ]

    @model_validator(mode="after")
    def _targets_need_a_rank(self):
        if self.lora_target_modules is not None and self.lora_dim is None:
            raise ValueError(
                "lora_target_modules needs lora_dim: set the LoRA rank (e.g. 32), or leave both unset"
            )
        if self.lora_dim is not None and getattr(self, "launcher", "bridge") == "megatron-lm":
            raise ValueError(
                "lora_dim needs launcher bridge: Megatron-LM has no LoRA (leave lora_dim unset for it)"
            )
        return self


def lora_config(data: dict[str, Any]) -> dict[str, Any]:
    """A request's fields as TrainingConfig's: lora_dim set means peft lora; unset or null, full training."""
    out = {k: v for k, v in data.items() if k not in ("lora_dim", "lora_target_modules")}
    targets = data.get("lora_target_modules")
    known = None if targets is None else [n for n in targets if n in LORA_TARGETS]
    if data.get("lora_dim") is not None and known != []:  # no placeable target: read as full training
        out.update(peft="lora", lora_dim=data["lora_dim"])
        if known:
            out["lora_target_modules"] = known
    return out


class TrainingRequestArgs(  # bases in reverse: pydantic lists the fields of the last base first
    LauncherArgs,
    MemoryArgs,
    OptimizerArgs,
    DataArgs,
    CudaGraphArgs,
    RecomputeArgs,
    PrecisionArgs,
    MoEArgs,
    ContextParallelArgs,
    BatchArgs,
    PipelineSplitArgs,
    ParallelArgs,
    SequenceArgs,
    ClusterArgs,
    ModelArgs,
):
    """Every knob a judging tool's request takes (the request models of estimate_memory, estimate_throughput and
    pick_recompute are this)."""


class TrainingConfig(PeftArgs, TransformerConfigArgs, TrainingRequestArgs):
    """A complete training configuration: every knob any tool reads (lint also reads TransformerConfigArgs)."""


FP8_RECIPES: dict[str, str] = {
    "fp8-delayed": "delayed",
    "fp8-tensorwise": "tensorwise",
    "fp8-blockwise": "blockwise",
    "mxfp8": "mxfp8",
}


def precision_is_fp8(precision: str) -> bool:
    return precision in FP8_RECIPES


def precision_is_quantized(precision: str) -> bool:
    return precision != "bf16"
