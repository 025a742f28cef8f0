"""Rules that depend on the launcher: Megatron Bridge and Megatron-LM disagree, and the engine follows each.

Found by the differential conformance suite (``make conformance``); each test names the Megatron source.
"""

from __future__ import annotations

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run

QWEN = dict(model="qwen3-30b-a3b", num_gpus=32, seq_len=32768, tp=2, cp=2, pp=2, ep=8, gbs=64)


def errors(base: dict, **overrides) -> set[str]:
    cfg = TrainingConfig(**{**base, **overrides})
    return {f.code for f in run(build_context(cfg)) if f.severity == Severity.error}


def test_flex_backend_gpu_gating_is_bridge_only():
    # Bridge training/flex_dispatcher_backend.py:102-124 refuses DeepEP on a GB200 ('NVIDIA GB200' is neither
    # sm 8.x/9.x nor a B200/B300 name); Megatron-LM and Megatron Core have no GPU check for the backends.
    deepep = dict(QWEN, gpu="gb200", dispatcher="flex-deepep")
    assert "DISPATCHER_GPU" in errors(deepep)
    assert "DISPATCHER_GPU" not in errors(deepep, launcher="megatron-lm")
    assert "DISPATCHER_GPU" not in errors(deepep, gpu="h100")


def test_fp8_param_gather_needs_fp8_and_lm_needs_the_distributed_optimizer():
    # fp8_param_gather becomes TransformerConfig.fp8_param (LM argument_utils.py:312; Bridge
    # mixed_precision.py:81-100), and MCore transformer_config.py:1439-1440 raises 'fp8_param must be used
    # together with fp8 mode' under NVFP4 (fp4 mode). The distributed-optimizer requirement is Megatron-LM's
    # alone (arguments.py:1061-1063): Bridge and Megatron Core have no such check.
    gather = dict(QWEN, gpu="b200", fp8_param_gather=True)
    for launcher in ("bridge", "megatron-lm"):
        assert "PRECISION_PARAM_GATHER" in errors(gather, precision="nvfp4", launcher=launcher)
        assert "PRECISION_PARAM_GATHER" not in errors(gather, precision="fp8-tensorwise", launcher=launcher)
    no_distopt = dict(gather, precision="fp8-tensorwise", use_distributed_optimizer=False)
    assert "PRECISION_PARAM_GATHER" in errors(no_distopt, launcher="megatron-lm")
    assert "PRECISION_PARAM_GATHER" not in errors(no_distopt, launcher="bridge")


def test_unset_etp_is_tp_under_megatron_lm_and_one_under_bridge():
    # Megatron-LM arguments.py:569-570 sets an unset --expert-tensor-parallel-size to TP (as MCore
    # model_parallel_config.py:506-507 does); Bridge models/transformer_config.py:80-89 uses 1 when EP > 1.
    # World 32, TP2 PP2 EP16: the expert side is ETP x 16 x 2, which factors only with ETP = 1.
    wide = dict(QWEN, ep=16)
    assert not {"EXPERT_WORLD_DIVISIBILITY"} & errors(wide)
    assert "EXPERT_WORLD_DIVISIBILITY" in errors(wide, launcher="megatron-lm")
    assert not errors(wide, launcher="megatron-lm", etp=1)
    ctx = build_context(TrainingConfig(**QWEN, launcher="megatron-lm"))
    assert ctx.etp == 2 and ctx.layout.edp == 32 // (2 * 8 * 2)
    codes = {f.code for f in run(build_context(TrainingConfig(**QWEN)))}
    assert "ETP_DEFAULTED" in codes
    assert "ETP_DEFAULTED" not in {f.code for f in run(ctx)}


def test_megatron_lm_refuses_vpp_next_to_a_layout():
    # LM arguments.py:893-905: at most one of --num-layers-per-virtual-pipeline-stage,
    # --num-virtual-stages-per-pipeline-rank and --pipeline-model-parallel-layout. Megatron Core
    # (transformer_config.py:1963-1968) and so Bridge only assert that an explicit VPP equals the layout's.
    dsv3 = dict(
        model="deepseek-v3", num_gpus=256, seq_len=131072, cp=32, ep=32, pp=8, gbs=256,
        pipeline_layout="Et|(tt|)*30mL",
    )  # fmt: skip
    assert not errors(dsv3, vpp=4)
    assert "PP_LAYOUT_CONFLICT" in errors(dsv3, vpp=4, launcher="megatron-lm")
    assert not errors(dsv3, launcher="megatron-lm")
