"""Megatron's own verdict on a TrainingConfig: run Megatron Core, Megatron-LM and Megatron Bridge checks on CPU.

Two front ends, as the engine's ``launcher`` field distinguishes them:

- ``bridge``: the config is built as a Megatron Bridge model provider builds it (Bridge's own
  ``TransformerConfig``/``MLATransformerConfig`` subclass from the wheel, whose ``finalize()`` applies
  Bridge's defaults and then runs Megatron Core's ``__post_init__``), then Bridge's CUDA-graph and
  flex-dispatcher validators;
- ``megatron-lm``: the config is written as ``pretrain_gpt.py`` flags, parsed by Megatron-LM's own parser,
  checked by ``validate_args`` and turned into a TransformerConfig by ``core_transformer_config_from_args``.

Both then run ``OptimizerConfig``, the constant num-microbatches calculator, ``initialize_model_parallel``
on a fake process-group backend, and two model-build checks that are pure Python on the CPU:
``get_num_layers_to_build`` for every (PP rank, virtual stage) and ``BaseMoELayer.__init__`` with the real
expert-parallel group. Every stage that can run is run, so a case that breaks two rules shows both.

The mapping from the engine's request to Megatron's fields is this harness's own code; where it has to
choose a value the engine leaves open, the choice is the engine's stated assumption (see ``ASSUMPTIONS``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.model.specs import GpuSpec, ModelSpec

from . import megatron_env

# Values the engine's request leaves open, and what the oracle sets (the engine says the same in a finding
# or a field description).
ASSUMPTIONS = {
    "sequence_parallel": "unset means on exactly when TP > 1 (engine SP_ASSUMED)",
    "max_position_embeddings": "max(model's, seq_len): long context is trained with RoPE scaling, which the "
    "engine does not model; Megatron-LM asserts max_position_embeddings >= seq_length",
    "NVTE_CPU_OFFLOAD_V1": "=1 when activation offload is on (engine OFFLOAD_ENV tells the user to export it)",
    "precision": "bf16 parameters (Bridge MoE recipes); FP8 recipes use --fp8-format e4m3",
    "optimizer": "adam with decoupled weight decay (AdamW), Megatron's default",
    "gbs": "unset means MBS x DP, as Megatron-LM defaults it",
    "dropout": "attention and hidden dropout 0.0, as the catalog models' Hugging Face configs give them and "
    "Bridge's model bridges set them; the engine has no dropout knob, so Megatron's dropout checks on graphed "
    "recompute (transformer_config.py:2548-2572) are out of its scope",
}


class HarnessError(RuntimeError):
    """The harness could not express a case to Megatron (a mapping bug, never a Megatron verdict)."""


@dataclass
class Failure:
    stage: str
    when: str  # config | init | build
    exc_type: str
    message: str
    where: str  # megatron-relative file:line of the raising statement
    line: str  # that statement's source text


@dataclass
class Verdict:
    launcher: str
    stages_run: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)  # "stage: why"

    @property
    def accepted(self) -> bool:
        return not self.failures

    def failures_by(self, whens: tuple[str, ...]) -> list[Failure]:
        return [f for f in self.failures if f.when in whens]


class Oracle:
    def __init__(self, core_dir: Path, bridge_dir: Path | None, lm_training: str | None) -> None:
        self.env = megatron_env.load(core_dir, bridge_dir, lm_training)
        import torch
        import torch.distributed as dist
        from megatron.core import num_microbatches_calculator as nmc
        from megatron.core import parallel_state
        from megatron.core.optimizer import OptimizerConfig
        from megatron.core.transformer.moe.moe_layer import BaseMoELayer
        from megatron.core.transformer.transformer_block import get_num_layers_to_build
        from torch.testing._internal.distributed.fake_pg import FakeStore

        self.torch, self.dist, self.FakeStore = torch, dist, FakeStore
        self.nmc, self.ps = nmc, parallel_state
        self.OptimizerConfig = OptimizerConfig
        self.get_num_layers_to_build = get_num_layers_to_build
        self.BaseMoELayer = BaseMoELayer
        self.roots = [str(self.env.core_dir)] + ([str(self.env.bridge_dir)] if self.env.bridge_dir else [])
        if self.env.training_dir is not None:
            self.roots.append(str(self.env.training_dir.parent.parent))
        self.bridge = None
        if bridge_dir is not None:
            import megatron.bridge.models.transformer_config as btc
            import megatron.bridge.training.flex_dispatcher_backend as bfd
            import megatron.bridge.utils.cuda_graph as bcg

            self.bridge = (btc, bcg, bfd)
        self.lm = None
        if self.env.training_dir is not None:
            import megatron.training.arguments as lm_arguments

            parser = lm_arguments.add_megatron_arguments(
                argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
            )
            # parse_args builds this parser on every call (0.3 s); hand it the one built once.
            lm_arguments.add_megatron_arguments = lambda _parser: parser
            self.lm = lm_arguments

    # ------------------------------------------------------------------ running one stage

    def _where(self, exc: BaseException) -> tuple[str, str]:
        frames = traceback.extract_tb(exc.__traceback__)
        for frame in reversed(frames):
            for root in self.roots:
                if frame.filename.startswith(root):
                    rel = os.path.relpath(frame.filename, root)
                    return f"{rel}:{frame.lineno}", (frame.line or "").strip()
        frame = frames[-1] if frames else None
        return (f"{frame.filename}:{frame.lineno}", (frame.line or "").strip()) if frame else ("?", "")

    def _stage(self, verdict: Verdict, stage: str, when: str, fn, *args):
        verdict.stages_run.append(stage)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                return fn(*args), True
        except SystemExit as exc:  # argparse refused a flag: a bug in lm_argv, not a Megatron verdict
            raise HarnessError(f"{stage}: the flags were refused by Megatron-LM's parser ({exc})") from exc
        except Exception as exc:  # Megatron raises ValueError, AssertionError, RuntimeError, KeyError...
            where, line = self._where(exc)
            verdict.failures.append(Failure(stage, when, type(exc).__name__, str(exc).strip(), where, line))
            return None, False

    # ------------------------------------------------------------------ entry point

    def check(self, cfg: TrainingConfig, model: ModelSpec, gpu: GpuSpec | None) -> Verdict:
        verdict = Verdict(cfg.launcher)
        if gpu is not None:
            megatron_env.set_gpu(gpu.device_name, gpu.compute_capability)
        else:
            megatron_env.set_gpu("NVIDIA H100 80GB HBM3", (9, 0))
        env = _case_env(cfg)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update({k: v for k, v in env.items() if v is not None})
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
        try:
            if cfg.launcher == "megatron-lm":
                if self.lm is None:
                    verdict.not_run.append(f"megatron-lm front end: {self.env.training_note}")
                    return verdict
                tconfig, sizes, opt_kwargs = self._lm_front_end(verdict, cfg, model)
            else:
                tconfig, sizes, opt_kwargs = self._bridge_front_end(verdict, cfg, model, gpu)
            self._common(verdict, cfg, model, tconfig, sizes, opt_kwargs)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return verdict

    # ------------------------------------------------------------------ Bridge front end

    def _bridge_front_end(self, verdict: Verdict, cfg: TrainingConfig, model: ModelSpec, gpu: GpuSpec | None):
        if self.bridge is None:
            raise RuntimeError("the Bridge front end needs the megatron-bridge wheel")
        btc, bcg, bfd = self.bridge
        kwargs = transformer_kwargs(cfg, model, self.torch)
        cls = btc.MLATransformerConfig if model.is_mla else btc.TransformerConfig
        tconfig = None

        def build():
            config = cls(**kwargs)
            config.finalize()
            return config

        tconfig, ok = self._stage(verdict, "bridge TransformerConfig.finalize", "config", build)
        if ok:
            self._stage(
                verdict,
                "bridge validate_cuda_graph_configuration",
                "config",
                bcg.validate_cuda_graph_configuration,
                tconfig,
            )
            if gpu is not None:
                self._stage(
                    verdict,
                    "bridge validate_flex_dispatcher_backend",
                    "init",
                    bfd.validate_flex_dispatcher_backend,
                    tconfig,
                )
            else:
                verdict.not_run.append("bridge validate_flex_dispatcher_backend: no GPU given")
        etp = cfg.etp if cfg.etp is not None else (1 if cfg.ep > 1 else cfg.tp)  # Bridge's default
        if tconfig is not None:
            etp = tconfig.expert_tensor_parallel_size
        sizes = dict(
            tp=cfg.tp,
            pp=cfg.pp,
            vpp=tconfig.virtual_pipeline_model_parallel_size if tconfig is not None else cfg.vpp,
            cp=cfg.cp,
            hcp=cfg.hierarchical_cp_sizes,
            ep=cfg.ep,
            etp=etp,
            world=cfg.num_gpus,
            gbs=cfg.gbs,
            mbs=cfg.mbs,
        )
        return tconfig, sizes, optimizer_kwargs(cfg, self.torch)

    # ------------------------------------------------------------------ Megatron-LM front end

    def _lm_front_end(self, verdict: Verdict, cfg: TrainingConfig, model: ModelSpec):
        lm = self.lm
        argv = lm_argv(cfg, model)
        os.environ["WORLD_SIZE"] = str(cfg.num_gpus)

        def parse_and_validate():
            saved_argv = sys.argv
            sys.argv = ["pretrain_gpt.py", *argv]
            try:
                args = lm.parse_args()
            finally:
                sys.argv = saved_argv
            lm.validate_args(args)
            return args

        args, ok = self._stage(verdict, "lm validate_args", "init", parse_and_validate)
        if not ok:
            return None, None, None
        tconfig, _ = self._stage(
            verdict,
            "lm core_transformer_config_from_args",
            "config",
            lm.core_transformer_config_from_args,
            args,
        )
        opt_kwargs = {
            f: getattr(args, f) for f in self.OptimizerConfig.__dataclass_fields__ if hasattr(args, f)
        }
        sizes = dict(
            tp=args.tensor_model_parallel_size,
            pp=args.pipeline_model_parallel_size,
            vpp=args.virtual_pipeline_model_parallel_size,
            cp=args.context_parallel_size,
            hcp=args.hierarchical_context_parallel_sizes,
            ep=args.expert_model_parallel_size,
            etp=args.expert_tensor_parallel_size,
            world=args.world_size,
            gbs=args.global_batch_size,
            mbs=args.micro_batch_size,
        )
        return tconfig, sizes, opt_kwargs

    # ------------------------------------------------------------------ shared stages

    def _common(self, verdict: Verdict, cfg: TrainingConfig, model: ModelSpec, tconfig, sizes, opt_kwargs):
        if sizes is None:
            return
        with megatron_env.te_fused_adam():
            self._stage(
                verdict, "mcore OptimizerConfig", "config", lambda: self.OptimizerConfig(**opt_kwargs)
            )
        model_size = sizes["tp"] * sizes["pp"] * sizes["cp"]
        if sizes["world"] % model_size == 0:
            dp = sizes["world"] // model_size
            gbs = sizes["gbs"] if sizes["gbs"] is not None else sizes["mbs"] * dp

            def calculator():
                try:
                    self.nmc.init_num_microbatches_calculator(0, None, gbs, sizes["mbs"], dp, False)
                    return self.nmc.get_num_microbatches()
                finally:
                    self.nmc.destroy_num_microbatches_calculator()

            self._stage(verdict, "mcore init_num_microbatches_calculator", "init", calculator)
        else:
            verdict.not_run.append("mcore init_num_microbatches_calculator: no DP (world does not factor)")
        _, init_ok = self._stage(
            verdict, "mcore initialize_model_parallel", "init", self._init_parallel, sizes
        )
        try:
            if tconfig is not None and tconfig.pipeline_model_parallel_layout is None:
                self._stage(verdict, "mcore get_num_layers_to_build", "build", self._layers_to_build, tconfig)
            if tconfig is not None and init_ok:
                self._stage(verdict, "mcore BaseMoELayer.__init__", "build", self._moe_layer, tconfig)
        finally:
            self._teardown()

    def _init_parallel(self, sizes) -> None:
        self._teardown()
        self.dist.init_process_group("fake", store=self.FakeStore(), rank=0, world_size=sizes["world"])
        self.ps.initialize_model_parallel(
            tensor_model_parallel_size=sizes["tp"],
            pipeline_model_parallel_size=sizes["pp"],
            virtual_pipeline_model_parallel_size=sizes["vpp"],
            context_parallel_size=sizes["cp"],
            hierarchical_context_parallel_sizes=sizes["hcp"],
            expert_model_parallel_size=sizes["ep"],
            expert_tensor_parallel_size=sizes["etp"],
            order="tp-cp-ep-dp-pp",
            create_gloo_process_groups=False,
        )

    def _teardown(self) -> None:
        self.ps.destroy_model_parallel()  # also clears groups a failed initialisation left half set
        if self.dist.is_initialized():
            self.dist.destroy_process_group()

    def _layers_to_build(self, tconfig) -> list[list[int]]:
        vpp = tconfig.virtual_pipeline_model_parallel_size
        stages = range(vpp) if vpp else [None]
        return [
            [self.get_num_layers_to_build(tconfig, vp_stage=v, pp_rank=r) for v in stages]
            for r in range(tconfig.pipeline_model_parallel_size)
        ]

    def _moe_layer(self, tconfig) -> None:
        from megatron.core.process_groups_config import ProcessGroupCollection

        class _Probe(self.BaseMoELayer):
            def forward(self, hidden_states):  # never called: only the constructor's checks run
                raise NotImplementedError

        pgs = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["ep", "tp"])
        _Probe(tconfig, layer_number=1, pg_collection=pgs)


# ---------------------------------------------------------------------- the mappings


def _case_env(cfg: TrainingConfig) -> dict[str, str | None]:
    return {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if cfg.expandable_segments else None,
        "NCCL_GRAPH_REGISTER": None if cfg.nccl_graph_register else "0",
        "NVTE_CPU_OFFLOAD_V1": "1"
        if cfg.activation_offload and cfg.nvte_cpu_offload_v1 is not False
        else None,
    }


def sequence_parallel(cfg: TrainingConfig) -> bool:
    return cfg.sequence_parallel if cfg.sequence_parallel is not None else cfg.tp > 1


def precision_fields(precision: str) -> dict[str, Any]:
    if precision == "bf16":
        return {}
    if precision == "nvfp4":
        return {"fp4": "e2m1", "fp4_recipe": "nvfp4"}
    recipe = {"fp8-delayed": "delayed", "fp8-tensorwise": "tensorwise", "fp8-blockwise": "blockwise"}
    return {"fp8": "e4m3", "fp8_recipe": recipe.get(precision, precision)}


def dispatcher_fields(dispatcher: str) -> dict[str, Any]:
    if dispatcher.startswith("flex-"):
        return {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": dispatcher[5:]}
    return {"moe_token_dispatcher_type": dispatcher}


def model_fields(model: ModelSpec, mtp_layers: int) -> dict[str, Any]:
    """Megatron Core TransformerConfig fields for the model architecture."""
    kw: dict[str, Any] = dict(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        ffn_hidden_size=model.ffn_hidden_size,
        kv_channels=model.head_dim,
        add_bias_linear=model.add_bias_linear,
        gated_linear_unit=model.gated_linear_unit,
        qk_layernorm=model.qk_layernorm,
        num_moe_experts=model.num_experts,
        moe_router_topk=model.moe_router_topk,
        moe_ffn_hidden_size=model.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size,
        moe_layer_freq=model.moe_layer_freq,
        moe_router_score_function=model.moe_router_score_function,
        moe_router_num_groups=model.moe_router_num_groups,
        moe_router_group_topk=model.moe_router_group_topk,
        mtp_num_layers=mtp_layers or None,
        attention_dropout=0.0,
        hidden_dropout=0.0,
    )
    if model.is_mla:
        kw.update(
            multi_latent_attention=True,
            q_lora_rank=model.q_lora_rank,
            kv_lora_rank=model.kv_lora_rank,
            qk_head_dim=model.head_dim,
            qk_pos_emb_head_dim=model.qk_pos_emb_head_dim,
            v_head_dim=model.v_head_dim,
        )
    if model.has_sliding_window:
        kw.update(window_size=(model.sliding_window, 0), window_attn_skip_freq=2)
    if model.softmax_sinks:
        kw.update(softmax_type="learnable")
    if model.has_linear_attention:
        kw.update(
            experimental_attention_variant="gated_delta_net",
            linear_attention_freq=[0 if t == "full" else 1 for t in model.attention_layer_types],
            linear_conv_kernel_dim=model.linear_conv_kernel_dim,
            linear_key_head_dim=model.linear_key_head_dim,
            linear_value_head_dim=model.linear_value_head_dim,
            linear_num_key_heads=model.linear_num_key_heads,
            linear_num_value_heads=model.linear_num_value_heads,
        )
    return kw


def mtp_layers(cfg: TrainingConfig, model: ModelSpec) -> int:
    return cfg.mtp_num_layers if cfg.mtp_num_layers is not None else model.mtp_num_layers


def transformer_kwargs(cfg: TrainingConfig, model: ModelSpec, torch) -> dict[str, Any]:
    """The fields a Bridge model provider carries for this request (before finalize)."""
    kw = model_fields(model, mtp_layers(cfg, model))
    kw.update(
        bf16=True,
        params_dtype=torch.bfloat16,
        tensor_model_parallel_size=cfg.tp,
        context_parallel_size=cfg.cp,
        pipeline_model_parallel_size=cfg.pp,
        virtual_pipeline_model_parallel_size=cfg.vpp,
        expert_model_parallel_size=cfg.ep,
        expert_tensor_parallel_size=cfg.etp,
        sequence_parallel=sequence_parallel(cfg),
        pipeline_model_parallel_layout=cfg.pipeline_layout,
        account_for_embedding_in_pipeline_split=cfg.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=cfg.account_for_loss_in_pipeline_split,
        num_layers_in_first_pipeline_stage=cfg.num_layers_in_first_pipeline_stage,
        num_layers_in_last_pipeline_stage=cfg.num_layers_in_last_pipeline_stage,
        hierarchical_context_parallel_sizes=cfg.hierarchical_cp_sizes,
        moe_expert_capacity_factor=cfg.moe_capacity_factor,
        moe_pad_expert_input_to_capacity=cfg.moe_pad_expert_input_to_capacity,
        moe_grouped_gemm=cfg.moe_grouped_gemm,
        moe_shared_expert_overlap=cfg.moe_shared_expert_overlap,
        moe_router_padding_for_quantization=cfg.moe_router_padding_for_quantization,
        overlap_moe_expert_parallel_comm=cfg.ep_overlap,
        recompute_granularity=cfg.recompute_granularity,
        recompute_method=cfg.recompute_method,
        recompute_num_layers=cfg.recompute_num_layers,
        cuda_graph_impl=cfg.cuda_graph_impl,
        variable_seq_lengths=cfg.variable_seq_lengths,
        fp8_param=cfg.fp8_param_gather,
    )
    if cfg.cp_comm_type is not None:
        kw["cp_comm_type"] = cfg.cp_comm_type
    if cfg.recompute_modules is not None:
        kw["recompute_modules"] = list(cfg.recompute_modules)
    if cfg.cuda_graph_modules is not None:
        kw["cuda_graph_modules"] = list(cfg.cuda_graph_modules)
    if cfg.activation_offload:
        kw.update(fine_grained_activation_offloading=True, offload_modules=list(cfg.activation_offload))
    kw.update(dispatcher_fields(cfg.dispatcher))
    kw.update(precision_fields(cfg.precision))
    return kw


def optimizer_kwargs(cfg: TrainingConfig, torch) -> dict[str, Any]:
    return dict(
        optimizer="adam",
        lr=1e-4,
        bf16=True,
        params_dtype=torch.bfloat16,
        use_distributed_optimizer=cfg.use_distributed_optimizer,
        use_precision_aware_optimizer=cfg.use_precision_aware_optimizer,
        optimizer_cpu_offload=cfg.optimizer_cpu_offload_fraction > 0,
        optimizer_offload_fraction=cfg.optimizer_cpu_offload_fraction,
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def lm_argv(cfg: TrainingConfig, model: ModelSpec) -> list[str]:
    """The request as pretrain_gpt.py flags (the model's architecture included)."""
    mtp = mtp_layers(cfg, model)
    seq = cfg.seq_len or 4096
    a = [
        "--num-layers", model.num_layers,
        "--hidden-size", model.hidden_size,
        "--num-attention-heads", model.num_attention_heads,
        "--ffn-hidden-size", model.ffn_hidden_size,
        "--kv-channels", model.head_dim,
        "--seq-length", seq,
        "--max-position-embeddings", max(seq, model.max_position_embeddings or 0),
        "--position-embedding-type", "rope",
        "--attention-dropout", 0.0,
        "--hidden-dropout", 0.0,
        "--micro-batch-size", cfg.mbs,
        "--tensor-model-parallel-size", cfg.tp,
        "--pipeline-model-parallel-size", cfg.pp,
        "--context-parallel-size", cfg.cp,
        "--expert-model-parallel-size", cfg.ep,
        "--num-experts", model.num_experts,
        "--moe-router-topk", model.moe_router_topk,
        "--moe-ffn-hidden-size", model.moe_ffn_hidden_size,
        "--moe-layer-freq", "[" + ",".join(str(x) for x in model.moe_layer_freq) + "]",
        "--moe-router-score-function", model.moe_router_score_function,
        "--moe-token-dispatcher-type", dispatcher_fields(cfg.dispatcher)["moe_token_dispatcher_type"],
        "--bf16",
        "--mock-data",
        "--tokenizer-type", "NullTokenizer",
        "--vocab-size", model.vocab_size,
        "--train-iters", 10,
        "--lr", 1e-4,
        "--optimizer", "adam",
    ]  # fmt: skip
    if cfg.gbs is not None:
        a += ["--global-batch-size", cfg.gbs]
    if cfg.etp is not None:
        a += ["--expert-tensor-parallel-size", cfg.etp]
    if model.gated_linear_unit:
        a.append("--swiglu")
    if not model.add_bias_linear:
        a.append("--disable-bias-linear")
    if model.qk_layernorm:
        a.append("--qk-layernorm")
    if model.is_mla:
        a += ["--multi-latent-attention", "--kv-lora-rank", model.kv_lora_rank]
        a += ["--qk-head-dim", model.head_dim, "--qk-pos-emb-head-dim", model.qk_pos_emb_head_dim]
        a += ["--v-head-dim", model.v_head_dim]
        if model.q_lora_rank:
            a += ["--q-lora-rank", model.q_lora_rank]
    elif model.num_query_groups != model.num_attention_heads:
        a += ["--group-query-attention", "--num-query-groups", model.num_query_groups]
    if model.moe_shared_expert_intermediate_size:
        a += ["--moe-shared-expert-intermediate-size", model.moe_shared_expert_intermediate_size]
    if model.moe_router_num_groups:
        a += ["--moe-router-num-groups", model.moe_router_num_groups]
        a += ["--moe-router-group-topk", model.moe_router_group_topk]
    if model.has_sliding_window:
        a += ["--window-size", f"({model.sliding_window},0)", "--window-attn-skip-freq", 2]
    if model.softmax_sinks:
        a += ["--softmax-type", "learnable"]
    if model.has_linear_attention:
        pattern = [0 if t == "full" else 1 for t in model.attention_layer_types]
        a += ["--experimental-attention-variant", "gated_delta_net"]
        a += ["--linear-attention-freq", "[" + ",".join(map(str, pattern)) + "]"]
        for name in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim"):
            a += [_flag(name), getattr(model, name)]
        a += ["--linear-num-key-heads", model.linear_num_key_heads]
        a += ["--linear-num-value-heads", model.linear_num_value_heads]
    if mtp:
        a += ["--mtp-num-layers", mtp]
    if sequence_parallel(cfg):
        a.append("--sequence-parallel")
    if cfg.vpp is not None:
        a += ["--num-virtual-stages-per-pipeline-rank", cfg.vpp]
    if cfg.pipeline_layout is not None:
        a += ["--pipeline-model-parallel-layout", cfg.pipeline_layout]
    if cfg.account_for_embedding_in_pipeline_split:
        a.append("--account-for-embedding-in-pipeline-split")
    if cfg.account_for_loss_in_pipeline_split:
        a.append("--account-for-loss-in-pipeline-split")
    if cfg.num_layers_in_first_pipeline_stage is not None:
        a += ["--decoder-first-pipeline-num-layers", cfg.num_layers_in_first_pipeline_stage]
    if cfg.num_layers_in_last_pipeline_stage is not None:
        a += ["--decoder-last-pipeline-num-layers", cfg.num_layers_in_last_pipeline_stage]
    if cfg.cp_comm_type is not None:
        a += ["--cp-comm-type", cfg.cp_comm_type]
    if cfg.hierarchical_cp_sizes:
        a += ["--hierarchical-context-parallel-sizes", *cfg.hierarchical_cp_sizes]
    backend = dispatcher_fields(cfg.dispatcher).get("moe_flex_dispatcher_backend")
    if backend:
        a += ["--moe-flex-dispatcher-backend", backend]
    if cfg.moe_capacity_factor is not None:
        a += ["--moe-expert-capacity-factor", cfg.moe_capacity_factor]
    if cfg.moe_pad_expert_input_to_capacity:
        a.append("--moe-pad-expert-input-to-capacity")
    if cfg.moe_grouped_gemm:
        a.append("--moe-grouped-gemm")
    if cfg.moe_shared_expert_overlap:
        a.append("--moe-shared-expert-overlap")
    if cfg.moe_router_padding_for_quantization:
        a.append("--moe-router-padding-for-quantization")
    if cfg.ep_overlap:
        a.append("--overlap-moe-expert-parallel-comm")
    if cfg.tp_comm_overlap:
        a.append("--tp-comm-overlap")
    if cfg.cross_entropy_fusion == "te":  # native and none differ only in memory: not written
        a += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]
    for name, value in precision_fields(cfg.precision).items():
        a += [{"fp8": "--fp8-format", "fp4": "--fp4-format"}.get(name, _flag(name)), value]
    if cfg.fp8_param_gather:
        a.append("--fp8-param-gather")
    if cfg.recompute_granularity is not None:
        a += ["--recompute-granularity", cfg.recompute_granularity]
    if cfg.recompute_method is not None:
        a += ["--recompute-method", cfg.recompute_method]
    if cfg.recompute_num_layers is not None:
        a += ["--recompute-num-layers", cfg.recompute_num_layers]
    if cfg.recompute_modules is not None:
        a += ["--recompute-modules", *cfg.recompute_modules]
    if cfg.activation_offload:
        a += ["--fine-grained-activation-offloading", "--offload-modules", *cfg.activation_offload]
    if cfg.cuda_graph_impl != "none":
        a += ["--cuda-graph-impl", cfg.cuda_graph_impl]
    if cfg.cuda_graph_modules:
        a += ["--cuda-graph-modules", *cfg.cuda_graph_modules]
    if not cfg.check_for_nan_in_loss:
        a.append("--no-check-for-nan-in-loss-and-grad")
    if cfg.use_distributed_optimizer:
        a.append("--use-distributed-optimizer")
    if cfg.use_precision_aware_optimizer:
        a.append("--use-precision-aware-optimizer")
    if cfg.optimizer_cpu_offload_fraction > 0:
        a += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", cfg.optimizer_cpu_offload_fraction]
    return [str(x) for x in a]
