"""The upstream corpus (conformance/corpus): its renderers, its comparison, its stored data, and the issue-23
launches upstream accepts, which lint_config must accept too (no Megatron needed: the verdicts are stored)."""

from __future__ import annotations

import json

import pytest
import yaml
from conformance.corpus import corpus
from conformance.corpus.agree import cites, compare, launch_text, lint_entry, parse_launch
from conformance.corpus.render_lm import render_model_args
from conformance.corpus.render_modelzoo import _model_args_line, expand

from moe_long_context.engine.rules.table import rule_table
from moe_long_context.errors import InputError

RULES = {code: r.source for code, r in rule_table().items()}


# ------------------------------------------------------------------ renderers


def test_functional_test_args_render_as_the_launcher_builds_them():
    """_run_training.sh: true -> the flag alone; empty -> dropped; ( ) and | values quoted as one word;
    [ ] loses its brackets; the scalar's own text (1e-5 stays 1e-5); set variables expand."""
    doc = yaml.compose(
        "MODEL_ARGS:\n  --bf16: true\n  --save: ''\n  --moe-layer-freq: ([0]*3+[1]*11)\n"
        "  --pipeline-model-parallel-layout: Et*2|(tt|)*5t|tmL\n  --recompute-modules: [moe_act]\n"
        "  --min-lr: 1.0e-5\n  --data-path: ${DATA_PATH}/x\n  --wandb-exp-name: $UNSET\n"
    )
    args = doc.value[0][1]
    argv, notes = render_model_args(args, {"DATA_PATH": "/mnt/artifacts"})
    assert argv == ["--bf16", "--moe-layer-freq", "([0]*3+[1]*11)", "--pipeline-model-parallel-layout",
                    "Et*2|(tt|)*5t|tmL", "--recompute-modules", "moe_act", "--min-lr", "1.0e-5",
                    "--data-path", "/mnt/artifacts/x", "--wandb-exp-name", "$UNSET"]  # fmt: skip
    assert notes == ["--recompute-modules: a non-scalar value, rendered as YAML flow text",
                     "$UNSET is not set by the launcher: left as written"]  # fmt: skip


def test_modelzoo_args_render_as_sbatch_benchmarking_builds_them():
    """yq there drops "false", turns "true" into the bare flag and joins "key value"; bash expands
    ${V:-default}, an empty value counting as unset."""
    doc = yaml.compose("MODEL_ARGS:\n  --a: true\n  --b: false\n  --c: 4\n")
    assert _model_args_line(doc.value[0][1]) == "--a  --c 4"
    env = {"TP": "2", "EMPTY": ""}
    assert expand('${TP} ${PP:-8} ${EMPTY:-x} $TP ${OUT:-"${TP}/o"}', env) == "2 8 x 2 2/o"


def test_a_launch_is_written_and_read_back_word_for_word():
    entry = {"env": {"NCCL_GRAPH_REGISTER": "0"}, "argv": ["--pipeline-model-parallel-layout", "Et|(tt|)*30mL",
             "--bf16"], "script": "pretrain_gpt.py"}  # fmt: skip
    env, argv = parse_launch(launch_text(entry))
    assert env == entry["env"] and argv == entry["argv"]


# ------------------------------------------------------------------ comparison


def test_a_rule_cites_the_raising_line_within_its_range():
    assert cites("LM arguments.py:1401-1402 validate_args", "megatron/training/arguments.py:1402")
    assert cites("MCore transformer/transformer_config.py:1969-1978 (assert)",
                 "megatron/core/transformer/transformer_config.py:1974")  # fmt: skip
    assert not cites(
        "MCore transformer/transformer_config.py:1963-1968", "megatron/training/arguments.py:1965"
    )
    assert not cites("LM arguments.py:1402", "megatron/training/arguments.py:1500")


def _entry(
    status, where="megatron/training/arguments.py:1402", message="Tensor parallel ... sequence parallelism"
):
    first = (
        None if status == "accepted" else {"stage": "lm validate_args", "where": where, "message": message}
    )
    return {"id": "x", "verdict": {"status": status, "first_failure": first}}


def test_every_kind_of_disagreement_is_named():
    ok = lint_entry({"kind": "megatron-lm", "gpu": "h100", "num_gpus": 8, "env": {}, "script": "pretrain_gpt.py",
                     "argv": ["--num-layers", "4", "--hidden-size", "512", "--num-attention-heads", "8", "--num-experts", "8", "--micro-batch-size", "1", "--seq-length", "1024", "--max-position-embeddings", "1024"]})  # fmt: skip
    assert compare(_entry("accepted"), ok, RULES).problems == []
    missed = compare(_entry("rejected"), ok, RULES)
    assert missed.problems and missed.problems[0].startswith("missed rejection")
    refused = compare(_entry("accepted"), InputError.plain("megatron_args: --x is bad"), RULES)
    assert refused.problems[0].startswith("valid entry refused")
    argparse_reject = _entry(
        "rejected", "argparse", "error: unrecognized arguments: --offload-optimizer-states"
    )
    named = compare(argparse_reject, InputError.plain("--offload-optimizer-states is not a flag"), RULES)
    assert named.problems == []
    other = compare(argparse_reject, InputError.plain("--something-else is bad"), RULES)
    assert other.problems[0].startswith("refused, but not for what upstream names")


# ------------------------------------------------------------------ the stored corpus


@pytest.mark.parametrize("name", sorted(corpus.FILES))
def test_every_judged_entry_has_a_verdict_and_a_source(name):
    entries = corpus.load(name)["entries"]
    assert entries
    for entry in entries:
        assert "@" in entry["source"] or "wheel" in entry["source"], entry["id"]
        if corpus.why_not_judged(entry) is None:
            assert entry["verdict"]["status"] in ("accepted", "rejected", "unresolved"), entry["id"]
            if entry["verdict"]["status"] != "accepted":
                assert entry["verdict"]["first_failure"]["where"], entry["id"]


def test_every_offline_config_names_its_source():
    for folder in corpus.DATA.parent.joinpath("hf").iterdir():
        source = json.loads((folder / "source.json").read_text())
        assert source["model_id"].replace("/", "--") == folder.name and source["source"]
        json.loads((folder / "config.json").read_text())


# ------------------------------------------------------------------ issue 23: what upstream accepts is accepted

ISSUE_ENTRIES = {  # the launches the issue found refused, each as the corpus stores it
    "bridge": [
        "bridge/perf_recipes.deepseek.h100.deepseek_v3.deepseek_v3_pretrain_1024gpu_h100_bf16_config",
        "bridge/perf_recipes.qwen.b200.qwen3_moe.qwen3_235b_a22b_pretrain_256gpu_b200_bf16_config",
        "bridge/perf_recipes.qwen.b200.qwen3_moe.qwen3_next_80b_a3b_pretrain_64gpu_b200_bf16_config",
        "bridge/recipes.moonlight.h100.moonlight_16b.moonlight_16b_pretrain_16gpu_h100_bf16_config",
        "bridge/recipes.nemotronh.h100.nemotron_3_nano.nemotron_3_nano_sft_8gpu_h100_bf16_config",
        "bridge/recipes.deepseek.h100.deepseek_v2.deepseek_v2_pretrain_128gpu_h100_bf16_config",
        "bridge/perf_recipes.gpt_oss.b200.gpt_oss.gpt_oss_120b_pretrain_64gpu_b200_bf16_config",
    ],
    "megatron-lm": [
        "lm/moe/gpt3_mcore_tp2_pp2_ep2_te_4experts2parallel",
        "lm/moe/gpt3_mcore_te_tp2_pp1_te_8experts2parallel_top2router",
    ],
}


_ISSUE_KEYS = ("train.manual_gc_eval=", "model.rotary_base=", "model.q_lora_rank=")


def test_the_issue_values_are_among_the_stored_recipes():
    """train.manual_gc_eval=100 on a bool field, a float rotary_base on an int field, q_lora_rank=null: the
    values the issue found refused are what Bridge's recipes set."""
    items = {o for i in ISSUE_ENTRIES["bridge"] for e in corpus.load("bridge")["entries"] if e["id"] == i
             for o in e["overrides"] if o.startswith(_ISSUE_KEYS)}  # fmt: skip
    assert {"train.manual_gc_eval=100", "model.rotary_base=1000000.0", "model.q_lora_rank=null"} <= items


@pytest.mark.parametrize(
    ("source", "entry_id"),
    [(s, i) for s, ids in ISSUE_ENTRIES.items() for i in ids],
    ids=lambda x: x.split(".")[-1],
)
def test_launches_upstream_accepts_lint_clean(source, entry_id):
    entry = next(e for e in corpus.load(source)["entries"] if e["id"] == entry_id)
    assert entry["verdict"]["status"] == "accepted"  # Bridge's / Megatron-LM's own validation, stored
    if entry["kind"] == "bridge":
        entry = {**entry, "model": corpus.lint_model(entry)}
    result = lint_entry(entry)
    assert not isinstance(result, Exception), result
    assert [f.code for f in result.findings if f.severity == "error"] == []
    if entry["kind"] == "bridge":  # the recipe's own values, kept unconverted as Bridge keeps them
        unread = [o.split("=")[0] for o in entry["overrides"] if o.startswith(_ISSUE_KEYS)]
        assert set(unread) <= {k for n in result.not_checked for k in n.keys}
    else:  # no FFN flags: validate_args' 4 x hidden (512 -> 2048) for the dense and the expert FFN
        derived = result.effective_config["derived"]
        assert (
            derived["--ffn-hidden-size"]["value"]
            == derived["--moe-ffn-hidden-size"]["value"]
            == 4 * int(entry["argv"][entry["argv"].index("--hidden-size") + 1])
        )
