"""Megatron Bridge's verdict on an override list, the way Bridge runs one, on a CPU.

The stages, in order (the first failure is the verdict): the overrides applied to a container of the
recipe's section classes at their defaults by Bridge's own ``process_config_with_overrides`` (OmegaConf from
a plain dict, Hydra's OverridesParser in struct mode, setattr on the dataclasses); ``runtime_config_update``
(environment variables, mixed precision, data-parallel size, communication overlap, then
``ConfigContainer.validate``, which finalizes the model provider: Bridge's defaults, then Megatron Core's
TransformerConfig checks); then the oracle's shared stages on the finalized model config
(OptimizerConfig, the microbatch calculator, ``initialize_model_parallel`` on torch's fake process-group
backend, ``get_num_layers_to_build``, ``BaseMoELayer.__init__``). ``WORLD_SIZE`` is the entry's GPU count;
the environment is restored after each entry (``apply_environment_variables`` exports the recipe's).
"""

from __future__ import annotations

import os
from typing import Any

from moe_long_context.model.catalog import load_gpu

from .. import megatron_env
from ..oracle import Oracle, Verdict
from .bridge_recipes import PRETRAINED_PLACEHOLDER, default_container, flatten, omega
from .judge_lm import oracle_stage


def _apply(classes: dict[str, Any], overrides: list[str]):
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    cfg = default_container(classes)
    return process_config_with_overrides(cfg, cli_overrides=list(overrides))


def judge_overrides(oracle: Oracle, classes: dict[str, Any], overrides: list[str], num_gpus: int, gpu: str,
                    expect: dict[str, Any] | None = None) -> tuple[Verdict, list[str]]:  # fmt: skip
    """Bridge's verdict, and the keys where the rebuilt container differs from ``expect`` (a recipe's flat
    OmegaConf view: the dump's round trip)."""
    from megatron.bridge.training.config import runtime_config_update

    spec = load_gpu(gpu)
    megatron_env.set_gpu(spec.device_name, spec.compute_capability)
    verdict = Verdict("bridge")
    os.makedirs(PRETRAINED_PLACEHOLDER, exist_ok=True)
    saved = dict(os.environ)
    os.environ.update({"WORLD_SIZE": str(num_gpus), "RANK": "0", "LOCAL_RANK": "0"})
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    mismatch: list[str] = []
    try:
        cfg, ok = oracle_stage(
            oracle, verdict, "bridge overrides (Hydra)", "config", _apply, classes, overrides
        )
        if not ok:
            return verdict, mismatch
        if expect is not None:
            have = flatten(omega(cfg))
            mismatch = sorted(k for k in set(have) | set(expect) if have.get(k) != expect.get(k))
        _, ok = oracle_stage(
            oracle, verdict, "bridge runtime_config_update", "config", runtime_config_update, cfg
        )
        if not ok:
            return verdict, mismatch
        model = cfg.model
        sizes = dict(
            tp=model.tensor_model_parallel_size, pp=model.pipeline_model_parallel_size,
            vpp=model.virtual_pipeline_model_parallel_size, cp=model.context_parallel_size,
            hcp=model.hierarchical_context_parallel_sizes, ep=model.expert_model_parallel_size,
            etp=model.expert_tensor_parallel_size, world=num_gpus, gbs=cfg.train.global_batch_size,
            mbs=cfg.train.micro_batch_size,
        )  # fmt: skip
        opt_kwargs = {f: getattr(cfg.optimizer, f) for f in oracle.OptimizerConfig.__dataclass_fields__
                      if hasattr(cfg.optimizer, f) and oracle.OptimizerConfig.__dataclass_fields__[f].init}  # fmt: skip
        oracle._common(verdict, None, None, model, sizes, opt_kwargs)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return verdict, mismatch
