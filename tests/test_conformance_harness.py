"""The conformance harness's own logic, without Megatron: generator, message families, comparison, allow-list."""

from __future__ import annotations

from collections import Counter

import pytest
from conformance.compare import compare, load_allowlist
from conformance.families import classify
from conformance.generate import MUTATIONS, generate, layout_string, valid_splits

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.pipeline import split_from_layout
from moe_long_context.engine.rules import FAMILIES, rule_table


def test_generator_is_deterministic_and_balanced():
    a, b = generate(400, seed=7), generate(400, seed=7)
    assert [c.as_dict() for c in a] == [c.as_dict() for c in b]
    assert generate(400, seed=8)[1].config != a[1].config
    families = Counter(c.family for c in a)
    assert families["valid"] == 200
    assert set(families) - {"valid"} <= set(FAMILIES)
    for c in a:
        TrainingConfig(**c.config)  # every case is a well-formed request


def test_every_mutation_applies_and_every_family_is_covered():
    cases = generate(2 * len(MUTATIONS) * 2, seed=3)
    targets = {c.target for c in cases if c.family != "valid"}
    assert targets == set(MUTATIONS)
    # "memory" and "throughput" findings are engine estimates (tests/test_memory_*.py, tests/test_step_findings.py),
    # not a Megatron check to compare against.
    # "launch" covers Megatron-LM's validate_args rules on engine fields (cross-entropy fusion, TP overlap); its
    # script-parsing rules are checked by lint_config's tests (tests/test_lint.py, tests/test_issue_rules.py).
    assert {family for family, _ in MUTATIONS.values()} == set(FAMILIES) - {"memory", "throughput"}


@pytest.mark.parametrize(("layers", "pp", "vpp", "mtp"), [(61, 8, 4, 1), (94, 4, 3, 0), (24, 2, 1, 0)])
def test_generated_layouts_parse(layers, pp, vpp, mtp):
    result = split_from_layout(layout_string(layers, pp, vpp, mtp), pp, layers, mtp)
    assert result.split is not None and sum(result.split.decoders_per_rank) == layers


def test_valid_splits_cover_every_method():
    methods = {s.method for s in valid_splits(61, 1)}
    assert methods == {"plain", "account_for", "uneven", "layout"}


@pytest.mark.parametrize(
    ("message", "line", "family"),
    [
        ("world_size (200) is not divisible by 64", "", "layout"),
        ("world_size (16) is not divisible by expert_tensor_model_pipeline_parallel size (32)", "", "layout"),
        ("num_attention_heads (64) must be a multiple of tensor_model_parallel_size (3).", "", "layout"),
        ("", "assert self.config.num_moe_experts % ep_size == 0", "layout"),
        ("Number of decoder layers 55must match num_layers 56", "", "pipeline"),
        (
            "global batch size (7) is not divisible by micro batch size (1) times data parallel size (2)",
            "",
            "batch",
        ),
        ("disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm", "", "recompute"),
        ("If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified", "", "moe"),
        ("moe cuda graph is only supported with drop-padding MoE.", "", "graphs"),
        (
            "When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in conjunction with "
            "`--fp8-recipe delayed`.",
            "",
            "optimizer",
        ),
        ("fp8_param must be used together with fp8 mode.", "", "precision"),
        ("something Megatron never said", "", "unclassified"),
    ],
)
def test_megatron_messages_map_to_families(message, line, family):
    assert classify(message, line) == family


def _failure(message, stage="mcore initialize_model_parallel", when="init"):
    return {"stage": stage, "when": when, "message": message, "where": "x.py:1", "line": ""}


def test_compare_statuses():
    allow = load_allowlist()
    ok = compare("a", "valid", "valid:base", "bridge", [], [], [], allow)
    assert ok.status == "agree-accept"
    both = compare(
        "b", "layout", "world-dense", "bridge", ["LAYOUT_WORLD_DIVISIBILITY"],
        [_failure("world_size (200) is not divisible by 64")], [], allow,
    )  # fmt: skip
    assert both.status == "agree-reject" and both.family_match
    engine_only = compare(
        "c", "layout", "world-dense", "bridge", ["LAYOUT_WORLD_DIVISIBILITY"], [], [], allow
    )
    assert engine_only.status == "disagree"
    megatron_only = compare(
        "d",
        "valid",
        "valid:base",
        "bridge",
        [],
        [_failure("world_size (2) is not divisible by 4")],
        [],
        allow,
    )
    assert megatron_only.status == "disagree"
    mismatch = compare(
        "e", "layout", "world-dense", "bridge", ["GBS_DIVISIBILITY"],
        [_failure("world_size (200) is not divisible by 64")], [], allow,
    )  # fmt: skip
    assert mismatch.status == "disagree" and mismatch.family_match is False


def test_allowlist_entries_name_real_rules_and_existing_tests():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    table = rule_table()
    entries = load_allowlist()
    assert entries, "the allow-list documents the known differences"
    for entry in entries:
        assert entry.reason and entry.source
        path, _, name = entry.test.partition("::")
        text = (root / path).read_text()
        assert f"def {name.split('[')[0]}(" in text, f"{entry.id}: test {entry.test} not found"
        for code in entry.codes:
            assert code in table
