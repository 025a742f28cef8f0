"""Checks on a launch's own keys and flags that no engine field carries (the dataset cache, the SM counts).

Each returns findings for ``Understood.notes``; the values are the launch's, with the framework's default
(None) for a key or flag it leaves out.
"""

from __future__ import annotations

from typing import Any

from ..engine.findings import Finding
from ..engine.rules import finding


def _cache_finding(needs: list[str], path_key: str) -> Finding:
    return finding(
        "DATASET_CACHE_PATH_MISSING",
        f"{' and '.join(needs)} without {path_key}: Megatron Core's dataset config asserts the cache folder "
        "is given (the indexes are read from the built caches).",
        f"Give {path_key} (the folder holding the built dataset caches), or turn {' and '.join(needs)} off.",
        [*needs, path_key],
    )


def _sm_finding(given: dict[str, Any], flex_key: str) -> Finding:
    shown = ", ".join(f"{k}={v}" for k, v in given.items())
    return finding(
        "MOE_FLEX_SM_KNOBS_CONFLICT",
        f"{shown}: Megatron Core routes the deprecated SM counts to {flex_key} and raises when they differ and "
        f"{flex_key} is not set.",
        f"Set {flex_key} to one SM count and drop the deprecated keys.",
        [*given, flex_key],
    )


def bridge_checks(keys: dict[str, Any]) -> list[Finding]:
    out = []
    needs = [k for k in ("dataset.fast_cache_load", "dataset.defer_npy_index_mmap") if keys.get(k) is True]
    if needs and keys.get("dataset.path_to_cache") is None:
        out.append(_cache_finding(needs, "dataset.path_to_cache"))
    sms = {
        k: keys[k]
        for k in ("model.moe_deepep_num_sms", "model.moe_hybridep_num_sms")
        if keys.get(k) is not None
    }
    if len(set(sms.values())) > 1 and keys.get("model.moe_flex_dispatcher_num_sms") is None:
        out.append(_sm_finding(sms, "model.moe_flex_dispatcher_num_sms"))
    return out + _fsdp_checkpoint(keys)


def _fsdp_checkpoint(keys: dict[str, Any]) -> list[Finding]:
    fsdp = [k for k in ("ddp.use_megatron_fsdp", "dist.use_megatron_fsdp") if keys.get(k) is True]
    paths = [k for k in ("checkpoint.save", "checkpoint.load") if keys.get(k) is not None]
    fmt = keys.get("checkpoint.ckpt_format", "torch_dist")  # Megatron-LM CheckpointConfig's default
    if not (fsdp and paths) or fmt == "fsdp_dtensor":
        return []
    return [finding(
        "BRIDGE_FSDP_CKPT_FORMAT",
        f"{fsdp[0]}=true with {' and '.join(paths)}: Megatron Bridge asserts Megatron-FSDP checkpoints in the "
        f"fsdp_dtensor format, and checkpoint.ckpt_format is {fmt}.",
        "Set checkpoint.ckpt_format=fsdp_dtensor (or drop checkpoint.save/load).",
        [fsdp[0], *paths, "checkpoint.ckpt_format"],
    )]  # fmt: skip


def megatron_checks(values: dict[str, list[str]]) -> list[Finding]:
    out = []
    needs = [f for f in ("--dataloader-fast-cache-load", "--dataloader-defer-npy-index-mmap") if f in values]
    if needs and "--data-cache-path" not in values:
        out.append(_cache_finding(needs, "--data-cache-path"))
    sms = {f: values[f][0] for f in ("--moe-deepep-num-sms", "--moe-hybridep-num-sms") if values.get(f)}
    if len(set(sms.values())) > 1 and "--moe-flex-dispatcher-num-sms" not in values:
        out.append(_sm_finding(sms, "--moe-flex-dispatcher-num-sms"))
    return out
