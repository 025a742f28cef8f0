"""Pipeline splits and layout strings, against Megatron Core 0.19's parser and split rules."""

from __future__ import annotations

import pytest

from moe_long_context.engine.pipeline import (
    balanced_layout,
    compress_layout,
    parse_layout,
    propose_splits,
    split_pipeline,
)


def test_parser_unrolls_like_megatron():
    # Example from Megatron's parse_str_to_list docstring.
    stages = parse_layout("Ettt|(tt|)*29,m|L")
    assert stages[0] == ["E", "t", "t", "t"]
    assert stages[1:30] == [["t", "t"]] * 29
    assert stages[-2:] == [["m"], ["L"]]
    assert parse_layout("Et*3|t*4L") == [["E", "t", "t", "t"], ["t", "t", "t", "t", "L"]]


def test_parser_rejects_unknown_characters():
    result = split_pipeline(4, 2, None, layout="Et|tx|tL")
    assert result.split is None
    assert "invalid layer character 'x'" in result.problems[0].message


def test_bridge_dsv3_layout_validates_and_is_what_the_engine_proposes():
    result = split_pipeline(61, 8, 4, mtp=1, layout="Et|(tt|)*30mL")
    assert result.problems == [] and result.vpp == 4
    assert result.split.decoders_per_rank == [7, 8, 8, 8, 8, 8, 8, 6]
    assert balanced_layout(61, 8, 4, 1) == "Et|(tt|)*30mL"


def test_layout_checks_counts_and_placement():
    def messages(text, layers=4, pp=2, mtp=0):
        return [p.message for p in split_pipeline(layers, pp, None, mtp, layout=text).problems]

    assert any("decoder layers t but the model has 4" in m for m in messages("Et|ttL"))
    assert any("first layer must be the embedding" in m for m in messages("tE|tttL"))
    assert any("does not divide by PP=2" in m for m in messages("Et|t|ttL"))
    assert any("mtp_num_layers is 1" in m for m in messages("Ett|ttL", mtp=1))
    assert any("decoder layers must come before MTP" in m for m in messages("Ett|tmtL", mtp=1))


def test_plain_split_rules():
    assert split_pipeline(64, 8, 4).split.decoders_per_rank == [8] * 8
    assert split_pipeline(61, 8, None).problems[0].code == "PP_LAYERS_NOT_DIVISIBLE"
    assert split_pipeline(48, 8, 4).problems[0].code == "PP_LAYERS_NOT_DIVISIBLE_VPP"  # 6 per rank over 4
    # account-for: (94 + 2) / 4 = 24 per rank, 24 % 12 == 0 (Qwen3-235B on PP4 x VPP12)
    split = split_pipeline(94, 4, 12, account_embedding=True, account_loss=True).split
    assert split.decoders_per_rank == [23, 24, 24, 23]
    assert split.stages[0][0].embedding and split.stages[0][0].decoders == 1


def test_uneven_split_rules_follow_transformer_config():
    ok = split_pipeline(61, 8, None, first=6, last=7).split
    assert ok.decoders_per_rank == [6, 8, 8, 8, 8, 8, 8, 7]
    bad = split_pipeline(61, 8, None, first=5, last=7)
    assert bad.problems[0].code == "PP_UNEVEN_NOT_DIVISIBLE" and "49 middle layers" in bad.problems[0].message
    vpp = split_pipeline(61, 8, 4, first=6, last=7)
    assert {p.code for p in vpp.problems} == {"PP_UNEVEN_NOT_DIVISIBLE"}
    conflict = split_pipeline(61, 8, None, first=6, account_embedding=True)
    assert conflict.problems[0].code == "PP_UNEVEN_WITH_ACCOUNT_FOR"


def test_compress_round_trips():
    stages = ["Et", "tt", "tt", "tt", "mL"]
    text = compress_layout(stages)
    assert text == "Et|(tt|)*3mL"
    assert ["".join(s) for s in parse_layout(text)] == stages


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "mtp"), [(61, 8, 4, 1), (94, 4, 12, 0), (61, 16, 2, 1), (27, 4, 1, 0)]
)
def test_every_proposal_is_a_valid_split(layers, pp, vpp, mtp):
    proposals = propose_splits(layers, pp, vpp, mtp)
    assert proposals
    for p in proposals:
        s = p.settings
        result = split_pipeline(
            layers,
            pp,
            vpp,
            mtp,
            layout=s.get("pipeline_layout"),
            first=s.get("num_layers_in_first_pipeline_stage"),
            last=s.get("num_layers_in_last_pipeline_stage"),
            account_embedding=s.get("account_for_embedding_in_pipeline_split", False),
            account_loss=s.get("account_for_loss_in_pipeline_split", False),
        )
        assert result.split is not None, (p, result.problems)
        assert sum(result.split.decoders_per_rank) == layers


def test_too_many_stages_for_the_layers_gives_no_layout():
    assert balanced_layout(4, 8, 4, 0) is None


def test_huge_repeat_counts_are_refused_not_unrolled():
    result = split_pipeline(4, 2, None, layout="E(t|)*99999999L")
    assert result.split is None and "too large" in result.problems[0].message
