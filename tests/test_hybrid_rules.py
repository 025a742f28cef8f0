"""Rules of the issue-16 layer kinds, each on both sides, with the Megatron Core 0.19.2 / Bridge 0.6.2 line."""

from __future__ import annotations

import pytest

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import Context, build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import run
from moe_long_context.engine.rules.mamba import mamba_tp_cp_problems, max_mamba_cp
from moe_long_context.model.catalog import load_model
from test_hybrid_models import nemotron_config

GLM = dict(model="glm-5", gpu="gb200", num_gpus=192, seq_len=131072, tp=1, cp=32, pp=6, ep=32, gbs=56)
NANO = dict(model="nemotron-3-nano", gpu="h100", num_gpus=64, seq_len=131072, tp=1, cp=8, pp=1, ep=8, gbs=64)


def findings(base: dict, **overrides) -> dict[str, Severity]:
    cfg = TrainingConfig(**{**base, **overrides})
    return {f.code: f.severity for f in run(build_context(cfg))}


def errors(base: dict, **overrides) -> set[str]:
    return {code for code, sev in findings(base, **overrides).items() if sev is Severity.error}


# ---------------------------------------------------------------- DSA (rules/dsa.py)


def test_dsa_cp_runs_over_allgather_only():
    """MCore transformer_config.py:2837-2852 and dsa.py:1805-1808: CP > 1 needs cp_comm_type allgather."""
    assert "DSA_CP_NEEDS_ALLGATHER" in errors(GLM, cp_comm_type="p2p")
    assert "DSA_CP_NEEDS_ALLGATHER" in errors(GLM, cp_comm_type="a2a")
    assert "DSA_CP_NEEDS_ALLGATHER" not in errors(GLM, cp_comm_type="all_gather")
    assert "DSA_CP_NEEDS_ALLGATHER" not in errors(GLM, cp=1, num_gpus=192, cp_comm_type="p2p", gbs=1024)


def test_te_mla_and_thd_limits_do_not_apply_to_dsa():
    """DSAttention all-gathers K/V itself (dsa.py:1805-1835), packed THD included (dsa_layout.py), so TE's
    MLA-needs-p2p and THD-not-with-all_gather rules stay quiet for GLM-5; they still fire for DeepSeek-V3 (the MLA
    one only unpacked: for THD, MCore pads V to the Q/K head dim, multi_latent_attention.py:85-99)."""
    glm = errors(GLM, cp_comm_type="all_gather", packed_sequences=True)
    assert not {"CP_MLA_COMM_TYPE", "CP_THD_COMM_TYPE"} & glm
    dsv3 = dict(GLM, model="deepseek-v3", num_gpus=256, pp=8)
    packed = errors(dsv3, cp_comm_type="all_gather", packed_sequences=True)
    assert "CP_THD_COMM_TYPE" in packed and "CP_MLA_COMM_TYPE" not in packed
    assert "CP_MLA_COMM_TYPE" in errors(dsv3, cp_comm_type="all_gather", packed_sequences=False)


def test_bridge_glm5_provider_sets_allgather():
    """Bridge glm5_bridge.py:128: an unset cp_comm_type is allgather for GLM-5, so no error, an info."""
    found = findings(GLM)
    assert found.get("DSA_BRIDGE_SETS_ALLGATHER") is Severity.info
    assert "DSA_CP_NEEDS_ALLGATHER" not in found
    # DeepSeek-V3.2 has no Bridge provider: unset means Megatron's p2p default, which DSA refuses
    v32 = dict(GLM, model="deepseek-v3.2", launcher="megatron-lm", num_gpus=256, pp=8)
    assert "DSA_CP_NEEDS_ALLGATHER" in errors(v32)
    assert "DSA_BRIDGE_SETS_ALLGATHER" not in findings(v32)


def test_dsa_needs_no_linear_bias():
    """MCore transformer_config.py:1383-1389: DSA uses AbsorbedMLASelfAttention, which needs add_bias_linear=False."""
    from moe_long_context.engine.rules.dsa import dsa_config

    cfg = TrainingConfig(**GLM, cp_comm_type="all_gather")
    plain = Context(cfg=cfg, model=load_model("glm-5"), gpu=None)
    biased = Context(
        cfg=cfg, model=load_model("glm-5").model_copy(update={"add_bias_linear": True}), gpu=None
    )
    assert [f.code for f in dsa_config(plain)] == []
    assert [f.code for f in dsa_config(biased)] == ["DSA_NO_LINEAR_BIAS"]


def test_deepseek_v32_has_no_bridge():
    """Bridge 0.6.2 models/deepseek holds deepseek_v2/v3/v4 bridges only."""
    v32 = dict(GLM, model="deepseek-v3.2", num_gpus=256, pp=8, cp_comm_type="all_gather")
    assert findings(v32).get("DSA_NO_BRIDGE") is Severity.warning
    assert "DSA_NO_BRIDGE" not in findings(v32, launcher="megatron-lm")


# ---------------------------------------------------------------- Mamba (rules/mamba.py)


def test_mamba_heads_and_groups_by_tp():
    """MCore ssm/mamba_mixer.py:260 (heads % TP), :268 (groups % TP), :272 (heads % groups)."""
    assert mamba_tp_cp_problems(64, 8, 8, 1) == []
    assert [c for c, _ in mamba_tp_cp_problems(64, 8, 16, 1)] == ["MAMBA_GROUPS_TP"]
    assert [c for c, _ in mamba_tp_cp_problems(60, 8, 1, 1)] == ["MAMBA_HEADS_GROUPS"]
    assert [c for c, _ in mamba_tp_cp_problems(64, 4, 3, 1)] == ["MAMBA_HEADS_TP", "MAMBA_GROUPS_TP"]
    # Nemotron-3 Nano (64 heads, 8 groups) at TP 16 on 16 GPUs: 8 groups do not split over 16 ranks
    nano16 = dict(NANO, num_gpus=16, tp=16, cp=1, ep=1, gbs=16)
    assert "MAMBA_GROUPS_TP" in errors(nano16)
    assert "MAMBA_GROUPS_TP" not in errors(nano16, tp=8, num_gpus=16, ep=2)


def test_mamba_head_parallel_cp():
    """MCore ssm/mamba_context_parallel.py:106-110 (heads/TP % CP) and :118-133 (groups/TP vs CP)."""
    assert mamba_tp_cp_problems(64, 8, 1, 64) == []  # 8 groups < 64: 64 % 8 == 0, groups repeated
    assert [c for c, _ in mamba_tp_cp_problems(64, 8, 8, 16)] == ["MAMBA_HEADS_CP"]  # 8 heads per TP rank
    assert [c for c, _ in mamba_tp_cp_problems(96, 6, 1, 4)] == ["MAMBA_GROUPS_CP"]  # 6 % 4 != 0
    assert mamba_tp_cp_problems(96, 6, 1, 3) == []  # 6 % 3 == 0
    assert max_mamba_cp(64, 8, 1) == [1, 2, 4, 8, 16, 32, 64]
    assert "MAMBA_HEADS_CP" in errors(NANO, num_gpus=128, cp=128, seq_len=1048576, gbs=128)
    assert "MAMBA_HEADS_CP" not in errors(NANO, num_gpus=64, cp=64, seq_len=1048576, gbs=64)


def test_mamba_fp8_in_proj_width():
    """MCore ssm/mamba_mixer.py:251-255: with FP8, 2 d_inner + 2 G N + heads must be a multiple of 16."""
    small = nemotron_config()  # 8 heads x 32 = 256 inner, 2 groups x 16 state: 512 + 64 + 8 = 584
    base = dict(model=small, gpu="h100", num_gpus=8, seq_len=4096, tp=1, cp=1, pp=1, ep=8, gbs=8)
    assert "MAMBA_FP8_IN_PROJ" in errors(base, precision="fp8-blockwise")
    assert "MAMBA_FP8_IN_PROJ" not in errors(base, precision="bf16")
    assert "MAMBA_FP8_IN_PROJ" not in errors(NANO, precision="fp8-blockwise")  # 10304 = 16 x 644


def test_hybrid_pipeline_split():
    """MCore models/hybrid/hybrid_layer_allocation.py:385-392 (VPP needs '|'; Bridge's HybridModelProvider refuses
    VPP outright, hybrid_provider.py:295-298), :436-441 (even split), :412-418 (middle stages even) and
    hybrid_model.py:205-212 (the GPT layout does not steer the split; Megatron-LM refuses it, arguments.py:799-812)."""
    nano = dict(NANO, num_gpus=64, cp=4, pp=2)
    vpp_codes = {"HYBRID_VPP_NEEDS_PIPES", "HYBRID_VPP_BRIDGE"}
    assert not {*vpp_codes, "HYBRID_PP_DIVISIBLE"} & errors(nano)
    assert vpp_codes & errors(nano, vpp=2) == {"HYBRID_VPP_BRIDGE"}
    assert vpp_codes & errors(nano, vpp=2, launcher="megatron-lm") == {"HYBRID_VPP_NEEDS_PIPES"}
    assert "HYBRID_PP_DIVISIBLE" in errors(dict(nano, num_gpus=96, pp=3))  # 52 % 3
    assert "HYBRID_PP_DIVISIBLE" not in errors(dict(nano, num_gpus=128, pp=4))  # 52 = 4 x 13
    # first 16 and last 16 leave 20 middle layers: two middle stages of 10 split, three do not
    assert "HYBRID_PP_DIVISIBLE" not in errors(
        dict(nano, num_gpus=128, pp=4),
        num_layers_in_first_pipeline_stage=16,
        num_layers_in_last_pipeline_stage=16,
    )
    assert "HYBRID_PP_DIVISIBLE" in errors(
        dict(nano, num_gpus=160, pp=5),
        num_layers_in_first_pipeline_stage=16,
        num_layers_in_last_pipeline_stage=16,
    )
    assert findings(nano, pipeline_layout="Et*26|t*26L").get("HYBRID_GPT_SPLIT_IGNORED") is Severity.warning
    assert "HYBRID_GPT_SPLIT_IGNORED" not in findings(nano)
    lm = dict(nano, launcher="megatron-lm")
    assert "HYBRID_LM_SPLIT_FLAGS" in errors(lm, account_for_loss_in_pipeline_split=True)
    assert "HYBRID_LM_SPLIT_FLAGS" not in errors(lm) and "HYBRID_LM_SPLIT_FLAGS" not in errors(
        nano, account_for_loss_in_pipeline_split=True
    )


@pytest.mark.parametrize(("granularity", "expected"), [("selective", True), ("full", False)])
def test_no_selective_recompute_label_for_mamba(granularity, expected):
    """MCore transformer_config.py:546-561: the recompute_modules choices have no Mamba label."""
    extra = {"recompute_method": "uniform", "recompute_num_layers": 1} if granularity == "full" else {}
    found = findings(NANO, recompute_granularity=granularity, **extra)
    assert ("MAMBA_NO_SELECTIVE_LABEL" in found) is expected
    assert "MAMBA_NO_SELECTIVE_LABEL" not in findings(GLM, recompute_granularity=granularity, **extra)


def test_size_cp_keeps_mamba_head_parallel_cp_legal():
    """size_cp stops at CP = heads / TP for Mamba (mamba_context_parallel.py:106-110): 64 at TP 1, 8 at TP 8."""
    from moe_long_context.tools.size_cp import SizeCpRequest, size_cp

    one = size_cp(SizeCpRequest(model="nemotron-3-nano", gpu="h100", seq_len=1048576, tp=1))
    eight = size_cp(SizeCpRequest(model="nemotron-3-nano", gpu="h100", seq_len=1048576, tp=8))
    assert (one.cp, eight.cp) == (64, 8)
    assert mamba_tp_cp_problems(64, 8, 1, 128) and mamba_tp_cp_problems(64, 8, 8, 16)


def test_mla_up_proj_on_dsa_needs_bf16():
    """MCore absorbed_mla.py:661-663: checkpointing the absorbed up-projection asserts without FP8/FP4."""
    selective = dict(GLM, cp_comm_type="all_gather", recompute_granularity="selective")
    assert "DSA_MLA_UP_PROJ_QUANTIZED" in errors(
        selective, recompute_modules=["mla_up_proj"], precision="mxfp8"
    )
    assert "DSA_MLA_UP_PROJ_QUANTIZED" not in errors(
        selective, recompute_modules=["mla_up_proj"], precision="bf16"
    )
    assert "DSA_MLA_UP_PROJ_QUANTIZED" not in errors(selective, recompute_modules=["moe"], precision="mxfp8")
    dsv3 = dict(selective, model="deepseek-v3", num_gpus=256, pp=8, cp_comm_type="p2p")
    assert "DSA_MLA_UP_PROJ_QUANTIZED" not in errors(
        dsv3, recompute_modules=["mla_up_proj"], precision="mxfp8"
    )
