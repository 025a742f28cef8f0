"""check_dp_budget: the seeds' layouts, every rule family's error with its fix, alternatives."""

from __future__ import annotations

import pytest

from conftest import error_codes, the
from moe_long_context.engine.findings import Severity
from moe_long_context.tools.check_dp_budget import CheckDpBudgetRequest, check_dp_budget
from seed_layouts import DSV3_128K, DSV3_256K, QWEN_128K


def budget(**kw):
    return check_dp_budget(CheckDpBudgetRequest(**kw))


@pytest.mark.parametrize(
    ("layout", "split", "dp", "edp", "min_gpus"),
    [
        # min_gpus = PP x max(TP x CP, EP x ETP)
        (DSV3_128K, {"pipeline_layout": "Et|(tt|)*30mL"}, 1, 1, 8 * 32),
        (DSV3_256K, {"pipeline_layout": "Et|(tt|)*30mL"}, 1, 2, 8 * 64),
        (
            QWEN_128K,
            {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True},
            2,
            1,
            4 * 32,
        ),
        (QWEN_128K, {"pipeline_layout": "Et|(tt|)*46tL"}, 2, 1, 4 * 32),
    ],
)
def test_seed_layouts_pass_with_the_right_budget(layout, split, dp, edp, min_gpus):
    gbs = 8 * dp * layout["pp"]  # 8 x PP microbatches
    r = budget(**layout, **split, gbs=gbs)
    assert r.valid, error_codes(r)
    assert (r.dp, r.edp) == (dp, edp)
    assert r.num_microbatches == 8 * layout["pp"]
    assert r.min_gpus == min_gpus
    assert sum(r.pipeline.decoders_per_rank) == (61 if layout["model"] == "deepseek-v3" else 94)


def test_dsv3_folding_numbers_by_hand():
    r = budget(**DSV3_128K, pipeline_layout="Et|(tt|)*30mL", gbs=64)
    # dense: 256 / (TP1 x CP32 x PP8) = 1; experts: 256 / (ETP1 x EP32 x PP8) = 1
    # min_gpus = PP8 x max(TP1 x CP32, EP32 x ETP1) = 256
    assert (r.dp, r.edp, r.min_gpus, r.etp) == (1, 1, 256, 1)
    assert r.layout == "TP1 CP32 PP8 VPP4 EP32 ETP1 DP1 EDP1"


def test_product_rule_is_not_what_the_engine_checks():
    # CP x EP x TP x PP = 32 x 32 x 1 x 8 = 8192 > 256 GPUs, yet Megatron accepts the layout.
    r = budget(**DSV3_128K, pipeline_layout="Et|(tt|)*30mL", gbs=64)
    assert r.valid
    folding = the(r, "PARALLEL_FOLDING")
    assert folding.severity == Severity.info and "8192" in folding.message


def test_unsplittable_layers_are_explained_with_a_working_proposal():
    r = budget(**DSV3_128K, gbs=64)
    f = the(r, "PP_LAYERS_NOT_DIVISIBLE")
    assert f.severity == Severity.error and "61 layers" in f.message
    assert "pipeline_layout=Et|(tt|)*30mL" in f.fix
    assert r.alternatives and r.alternatives[0].settings == {"pipeline_layout": "Et|(tt|)*30mL"}
    q = budget(**QWEN_128K, gbs=64)
    fix = the(q, "PP_LAYERS_NOT_DIVISIBLE").fix
    assert "account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True" in fix


@pytest.mark.parametrize(
    ("overrides", "code", "fix_part"),
    [
        ({"num_gpus": 200}, "LAYOUT_WORLD_DIVISIBILITY", "CP may be one of"),
        ({"num_gpus": 128, "cp": 16, "ep": 64}, "EXPERT_WORLD_DIVISIBILITY", "EP may be one of"),
        ({"ep": 48, "num_gpus": 384, "cp": 48}, "EP_DIVIDES_EXPERTS", "divides 256"),
        ({"gbs": 101, "cp": 16}, "GBS_DIVISIBILITY", "multiple of 2"),
        ({"seq_len": 131000}, "SEQ_CP_DIVISIBILITY", "seq_len 130944 or 131008"),
        ({"pipeline_layout": None}, "PP_LAYERS_NOT_DIVISIBLE", "pipeline_layout="),
        (
            {"pp": 1, "vpp": 4, "cp": 256, "pipeline_layout": None, "seq_len": 262144},
            "VPP_NEEDS_PP",
            "Drop vpp",
        ),
        ({"gbs": 4}, "VPP_MICROBATCHES", "gbs=8"),
        ({"tp": 3, "cp": 8, "num_gpus": 192}, "TP_DIVIDES_HEADS", "TP in"),
        ({"tp": 2, "sequence_parallel": False, "cp": 16}, "MOE_TP_NEEDS_SP", "sequence_parallel=true"),
        ({"cp_comm_type": "a2a"}, "CP_MLA_COMM_TYPE", "p2p"),
        ({"cp_comm_type": "a2a+p2p"}, "CP_HIERARCHY_REQUIRED", "hierarchical_cp_sizes"),
        (
            {"cp_comm_type": "a2a+p2p", "hierarchical_cp_sizes": [8, 2]},
            "CP_HIERARCHY_PRODUCT",
            "product is 32",
        ),
    ],
)
def test_each_rule_breaks_with_an_error_and_a_fix(overrides, code, fix_part):
    base = {**DSV3_128K, "pipeline_layout": "Et|(tt|)*30mL", "gbs": 64}
    r = budget(**{**base, **overrides})
    assert code in error_codes(r), [(f.code, f.message) for f in r.findings]
    f = next(f for f in r.findings if f.code == code)
    assert f.fix and fix_part in f.fix, f.fix
    assert f.source and ("MCore" in f.source or "LM" in f.source or "TE" in f.source or "Bridge" in f.source)


def test_query_groups_and_a2a_heads_on_qwen():
    # 4 query groups: TP 8 is a multiple (fine), TP 3 neither.
    r = budget(model="qwen3-235b-a22b", num_gpus=24, tp=3, sequence_parallel=True)
    assert {"TP_DIVIDES_HEADS", "QUERY_GROUPS_TP"} <= set(error_codes(r))
    # a2a over CP 4 with TP 4: one KV head per rank, not divisible by 4
    r = budget(
        **QWEN_128K,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
        gbs=16,
        cp_comm_type="a2a",
    )
    f = the(r, "CP_A2A_HEADS")
    assert "16 query and 1 KV heads per rank" in f.message and "p2p" in f.fix


def test_gdn_heads_over_tp_cp_on_qwen3_next():
    r = budget(model="qwen3-next-80b-a3b", num_gpus=64, tp=2, cp=16, ep=32, seq_len=65536)
    assert "GDN_HEADS_TP_CP" in error_codes(r)  # 16 key heads over TP x CP = 32


def test_gpt_oss_needs_etp1_and_a2a():
    r = budget(
        model="gpt-oss-120b",
        num_gpus=64,
        tp=2,
        etp=2,
        ep=8,
        sequence_parallel=True,
        seq_len=32768,
        cp=2,
        cp_comm_type="p2p",
    )
    assert {"MOE_BIAS_NEEDS_ETP1", "CP_SLIDING_WINDOW_COMM_TYPE", "CP_SINKS_COMM_TYPE"} <= set(error_codes(r))
    ok = budget(
        model="gpt-oss-120b",
        num_gpus=64,
        tp=2,
        etp=1,
        ep=8,
        sequence_parallel=True,
        seq_len=32768,
        cp=2,
        cp_comm_type="a2a",
    )
    assert ok.valid, error_codes(ok)


def test_bridge_defaults_are_reported_as_info():
    r = budget(model="qwen3-235b-a22b", num_gpus=64, tp=4, ep=16)
    assert r.etp == 1 and r.sequence_parallel
    assert the(r, "ETP_DEFAULTED").severity == Severity.info
    assert the(r, "SP_ASSUMED").severity == Severity.info
    r = budget(model="qwen3-235b-a22b", num_gpus=64, tp=1, ep=16, sequence_parallel=True)
    assert the(r, "SP_WITHOUT_TP").severity == Severity.info and not r.sequence_parallel


def test_dp_one_warns_and_gbs_default_is_one_microbatch():
    r = budget(model="qwen3-30b-a3b", num_gpus=8, tp=1, cp=8, ep=8)
    assert r.dp == 1 and r.gbs == 1 and r.num_microbatches == 1
    assert the(r, "DP_ONE").severity == Severity.warning
    assert the(r, "GBS_DEFAULTED").severity == Severity.info


def test_nvlink_advice():
    r = budget(model="qwen3-235b-a22b", gpu="h100", num_gpus=64, tp=16, ep=4, sequence_parallel=True)
    assert the(r, "TP_OUTSIDE_NVLINK").severity == Severity.warning


def test_alternatives_are_accepted_configurations():
    r = budget(**{**DSV3_128K, "num_gpus": 192, "gbs": 60})
    assert not r.valid and r.alternatives
    for alt in r.alternatives:
        trial = budget(**{**DSV3_128K, "num_gpus": 192, "gbs": 60, **alt.settings})
        assert trial.valid, (alt, error_codes(trial))
        assert (trial.dp, trial.edp) == (alt.dp, alt.edp)


def test_no_alternatives_when_valid():
    assert budget(**DSV3_128K, pipeline_layout="Et|(tt|)*30mL", gbs=64).alternatives == []


def test_pipeline_layout_conflicts_with_other_split_flags():
    r = budget(**DSV3_128K, gbs=64, pipeline_layout="Et|(tt|)*30mL", account_for_loss_in_pipeline_split=True)
    assert "PP_LAYOUT_CONFLICT" in error_codes(r)


def test_layout_vpp_mismatch():
    r = budget(**{**DSV3_128K, "vpp": 2}, gbs=64, pipeline_layout="Et|(tt|)*30mL")
    assert "PP_LAYOUT_VPP_MISMATCH" in error_codes(r)


def test_alternatives_that_no_request_could_carry_are_left_out():
    """MBS 4096 on 8192 GPUs: filling the pipeline would need a gbs beyond the field's bound."""
    asked = dict(model="deepseek-v3", num_gpus=8192, mbs=4096, pp=3)
    result = budget(**asked)
    assert not result.valid
    for alternative in result.alternatives:  # each one can be sent back as a request
        CheckDpBudgetRequest(**{**asked, **alternative.settings})
