"""Parameter-efficient fine-tuning: Megatron Bridge's ``cfg.peft`` (LoRA), which Megatron-LM has no flag for.

lint reads it from Bridge overrides (``peft.dim``, ``peft.target_modules``) and a ConfigContainer's ``peft`` section;
TrainingConfig carries it as ``peft``/``lora_dim``/``lora_target_modules`` (kept out of the schemas). The estimating
and planning requests take ``config.LoraRequestArgs`` instead: one switch, ``lora_dim`` set means LoRA.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from ..model.lora import LORA_DEFAULT_TARGETS, LORA_TARGETS


class PeftArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    peft: SkipJsonSchema[Literal["none", "lora"]] = Field(
        default="none",
        description="none: full training; lora: Bridge's LoRA (peft/lora.py), the base weights frozen and rank-dim "
        "adapters trained on the target linears.",
    )
    lora_dim: SkipJsonSchema[int] = Field(
        default=32, ge=1, le=65536, description="LoRA rank (Bridge peft.dim; LoRA's default 32)."
    )
    lora_target_modules: SkipJsonSchema[tuple[str, ...]] = Field(
        default=LORA_DEFAULT_TARGETS,
        description="Linears LoRA wraps, by module name (Bridge peft.target_modules; default linear_qkv, "
        "linear_proj, linear_fc1, linear_fc2; Nemotron-H recipes add in_proj and out_proj).",
    )

    @field_validator("lora_target_modules", mode="before")
    @classmethod
    def _known_targets(cls, value):
        return known_targets(value)


def known_targets(value: Any) -> tuple[str, ...]:
    """The target names as a tuple without repeats; a name the engine cannot place is refused, naming them all."""
    if not isinstance(value, str | list | tuple):
        raise ValueError(
            f"lora_target_modules must be module names (a list of them or one name), not {value!r}"
        )
    names = [value] if isinstance(value, str) else list(value)
    unknown = [n for n in names if n not in LORA_TARGETS]
    if unknown or not names:
        raise ValueError(
            f"lora_target_modules {unknown or names} not modelled: allowed module names are "
            f"{', '.join(LORA_TARGETS)} (no wildcards, no exclude_modules)"
        )
    return tuple(dict.fromkeys(names))
