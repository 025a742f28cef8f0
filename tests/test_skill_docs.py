"""The skill's documents say only what the engine computes.

Every layout, number, label, flag and key written in SKILL.md, the hand-written references/ pages and
card.yaml is extracted here and checked against the engine: layouts go through check_dp_budget, CP claims
through size_cp, GiB figures through estimate_memory, pick_recompute or the GPU catalog, and every
backticked name must be something the engine (or Megatron-LM's argument parser) knows. The informal
recompute labels and the product rule of the original skill may appear only where the text calls them wrong.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import typing
from functools import cache
from pathlib import Path

import pytest
import yaml

from moe_long_context.cli import build_parser
from moe_long_context.dialects import tables as dialects
from moe_long_context.engine.config import RECOMPUTE_MODULES, CudaGraphImpl, TrainingConfig
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.pipeline import parse_layout, propose_splits
from moe_long_context.engine.representative import representative_layouts
from moe_long_context.engine.rules import rule_table
from moe_long_context.engine.rules.cp import shard_target
from moe_long_context.engine.rules.graphs import CUDA_GRAPH_MODULES
from moe_long_context.engine.rules.recompute import INFORMAL_LABELS
from moe_long_context.faces.registry import TOOLS
from moe_long_context.model.catalog import gpu_ids, load_gpu, load_model, model_ids
from moe_long_context.model.hf import supported_model_types
from moe_long_context.model.lora import LORA_TARGETS

ROOT = Path(__file__).resolve().parents[1]
SKILL_NAME = "nemo-mbridge-perf-moe-long-context"
GENERATED = {
    "rules.md",
    "tools.md",
    "families.md",
}  # generated from the engine; tests/test_docs.py keeps them current
TOPIC_PAGES = sorted(p for p in (ROOT / "references").glob("*.md") if p.name not in GENERATED)
TOOL = {tool.name: tool for tool in TOOLS}
LAYOUTS = {layout.id: layout for layout in representative_layouts()}

# A unit (a bullet, a paragraph, one card entry) "calls something wrong" when it says so in one of these words.
WRONG = re.compile(r"\b(not|wrong|rejects?|rejected|invalid|informal|unknown|error|fails?|copied)\b", re.I)

# ---------------------------------------------------------------- the checkable statement forms
LAYOUT = re.compile(
    r"`(?P<model>[\w.-]+)` on (?P<gpus>\d+) `(?P<gpu>\w+)` at (?P<seq>\d+) tokens: "
    r"TP=(?P<tp>\d+) CP=(?P<cp>\d+) EP=(?P<ep>\d+)(?: ETP=(?P<etp>\d+))? PP=(?P<pp>\d+)(?: VPP=(?P<vpp>\d+))? "
    r"→ DP=(?P<dp>\d+) EDP=(?P<edp>\d+)"
)
SIZE_CP = re.compile(
    r"size_cp\(`(?P<model>[\w.-]+)`, `(?P<gpu>\w+)`, (?P<seq>\d+) tokens, tp (?P<tp>\d+)\) → "
    r"CP (?P<cp>\d+), `(?P<comm>[\w+]+)`(?: \[(?P<a2a>\d+), (?P<p2p>\d+)\])?"
)
MEMORY = re.compile(
    r"estimate_memory\(`moe-lc://layouts/(?P<layout>[\w.-]+)`(?:, precision (?P<precision>[\w-]+))?\) = "
    r"(?P<gib>[\d.]+) GiB"
)
PICK = re.compile(
    r"pick_recompute\(`moe-lc://layouts/(?P<layout>[\w-]+)` without recompute or offload\) → (?P<labels>(?:`\w+`,? ?)+|full recompute): "
    r"(?P<before>[\d.]+) → (?P<after>[\d.]+) GiB"
)
THROUGHPUT = re.compile(
    r"estimate_throughput\(`moe-lc://layouts/(?P<layout>[\w-]+)`\) = (?P<tflops>[\d.]+) TFLOP/s"
)
HEADROOM = re.compile(r"headroom of (?P<pct>\d+) % of usable HBM")
DEFAULT_BATCH = re.compile(
    r"power of two of sequences within 2\^23 tokens a step,? \(?(?P<gbs>\d+) sequences at (?P<seq>\d+) tokens, "
    r"(?P<gbs2>\d+) at (?P<seq2>\d+)"
)
STATED = re.compile(r"stated error of (?P<pct>\d+) % for (?P<family>[a-z][a-z0-9]*_[a-z0-9_]+)")
FAMILY_ERROR = re.compile(
    r"(?P<pct>\d+) % for (?P<family>[a-z][a-z0-9]*_[a-z0-9_]+)"
)  # every family's figure
CAPACITY = re.compile(r"the (?P<gib>[\d.]+) GiB of an? (?P<gpu>[A-Z]+\d+)")
LAYOUT_SHAPED = re.compile(
    r"\b(?:E?TP|CP|EP|V?PP|E?DP)=?\d"
)  # what a layout written any other way looks like
PRODUCT_RULE = re.compile(r"\b(?:CP|EP|TP|PP)(?: ?[x×*] ?(?:CP|EP|TP|PP)){3}\b")
ORIGINAL_SKILL_LABELS = ("up_proj", "norm")  # what the original skill writes for mla_up_proj and layernorm
INFORMAL = re.compile(r"[`'\"](?P<label>up_proj|norm)[`'\"]")
BACKTICKED = re.compile(r"`([^`]+)`")
CITATION = re.compile(r"\[(?:[^\]]*\b)?(?:MCore|LM|Bridge|TE|tool)\b[^\]]*\]")


def _units_of_markdown(text: str) -> list[str]:
    """Bullets and paragraphs, each joined into one line (statements wrap across lines)."""
    units: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            units.append([])
        elif re.match(r"([-*]|\d+\.|#+|\|) ", stripped) or not units:
            units.append([stripped])
        else:
            units[-1].append(stripped)
    return [" ".join(u) for u in units if u]


def _strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for key, value in node.items() for s in (*_strings(key), *_strings(value))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return []


@cache
def card() -> dict:
    return yaml.safe_load((ROOT / "card.yaml").read_text(encoding="utf-8"))


def _units_of_card(skip: tuple[str, ...] = ()) -> list[str]:
    """Each card string is a unit, except that a failure mode is read as one entry."""
    units = []
    for key, value in card().items():
        if key in skip:
            continue
        if key == "failure_modes":
            units += [" ".join(_strings(entry)) for entry in value]
        else:
            units += [" ".join(s.split()) for s in _strings(value)]
    return units


def _skill_body() -> str:
    return (ROOT / "SKILL.md").read_text(encoding="utf-8").split("\n---\n", 1)[1]


@cache
def documents() -> dict[str, list[str]]:
    """Every checked document as its units, keyed by its path in the repository."""
    docs = {"SKILL.md": _units_of_markdown(_skill_body()), "card.yaml": _units_of_card()}
    for page in TOPIC_PAGES:
        docs[f"references/{page.name}"] = _units_of_markdown(page.read_text(encoding="utf-8"))
    return docs


def matches(pattern: re.Pattern, docs: typing.Iterable[str] | None = None) -> list[tuple[str, re.Match]]:
    found = []
    for name in docs or documents():
        for unit in documents()[name]:
            found += [(name, m) for m in pattern.finditer(unit)]
    return found


# ---------------------------------------------------------------- Agent Skills format and links
def test_agentskills_validate_accepts_the_skill(tmp_path):
    """The skills-ref reference validator (the `agentskills` command) accepts the repository as the skill."""
    cli = shutil.which("agentskills", path=str(Path(sys.executable).parent)) or shutil.which("agentskills")
    assert cli, "the agentskills command comes with the skills-ref package of the dev extra"
    folder = ROOT
    if ROOT.name != SKILL_NAME:  # the validator wants the folder named as the skill, as users install it
        folder = tmp_path / SKILL_NAME
        folder.symlink_to(ROOT, target_is_directory=True)
    run = subprocess.run([cli, "validate", str(folder)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Valid skill" in run.stdout


@pytest.mark.parametrize(
    "doc", ["SKILL.md", "skill-card.md", "README.md", *(f"references/{p.name}" for p in TOPIC_PAGES)]
)
def test_every_relative_link_resolves(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = (ROOT / doc).parent / link.split("#", 1)[0]
        assert target.exists(), f"{doc} links to {link}, which does not exist"


def test_skill_links_every_reference_page():
    linked = set(re.findall(r"\]\(references/([\w.-]+\.md)\)", _skill_body()))
    assert linked == {p.name for p in (ROOT / "references").glob("*.md")}


# ---------------------------------------------------------------- layouts, CP, memory
def _split_settings(model: str, gpu: str, gpus: int, seq: int, sizes: dict) -> dict:
    """The published layout's own split, or the first split the engine proposes for these sizes."""
    for layout in LAYOUTS.values():
        c = layout.config
        same = (c["model"], c["gpu"], c["num_gpus"], c["seq_len"]) == (model, gpu, gpus, seq)
        if same and all(c.get(k) == v for k, v in sizes.items() if v is not None):
            return {k: c[k] for k in ("pipeline_layout", "account_for_embedding_in_pipeline_split",
                                      "account_for_loss_in_pipeline_split") if k in c}  # fmt: skip
    spec = load_model(model)
    proposals = propose_splits(spec.num_layers, sizes["pp"], sizes.get("vpp"), spec.mtp_num_layers)
    assert proposals, f"no pipeline split for {model} at PP {sizes['pp']} VPP {sizes.get('vpp')}"
    return dict(proposals[0].settings)


def test_layout_statements_pass_check_dp_budget_with_the_stated_dp_and_edp():
    found = matches(LAYOUT)
    assert len({m.group(0) for _, m in found}) >= 6  # the three published layouts and the three 4K anchors
    for doc, m in found:
        sizes = {k: int(m.group(k)) if m.group(k) else None for k in ("tp", "cp", "ep", "etp", "pp", "vpp")}
        dp, gpus, seq = int(m.group("dp")), int(m.group("gpus")), int(m.group("seq"))
        request = {
            "model": m.group("model"), "gpu": m.group("gpu"), "num_gpus": gpus, "seq_len": seq,
            **{k: v for k, v in sizes.items() if v is not None},
            "mbs": 1, "gbs": dp * sizes["pp"] * 2,  # enough microbatches for any interleaved schedule
            "sequence_parallel": sizes["tp"] > 1,
            **_split_settings(m.group("model"), m.group("gpu"), gpus, seq, sizes),
        }  # fmt: skip
        if "pipeline_layout" in request:
            request.pop("vpp", None)  # the layout string sets VPP (Megatron-LM refuses both)
        result = TOOL["check_dp_budget"].call(request)
        errors = [f.code for f in result.findings if f.severity == "error"]
        assert result.valid and not errors, f"{doc}: {m.group(0)} -> {errors}"
        assert (result.dp, result.edp) == (dp, int(m.group("edp"))), f"{doc}: {m.group(0)}"
        assert result.vpp == sizes["vpp"], f"{doc}: {m.group(0)}"


def test_published_layouts_are_written_as_the_engine_has_them():
    """SKILL.md and card.yaml state each layout of engine/layouts.yaml with its sizes and expected DP/EDP."""
    for doc in ("SKILL.md", "card.yaml"):
        stated = {(m["model"], int(m["gpus"]), m["gpu"], int(m["seq"])): m for _, m in matches(LAYOUT, [doc])}
        for layout in LAYOUTS.values():
            c = layout.config
            m = stated.get((c["model"], c["num_gpus"], c["gpu"], c["seq_len"]))
            assert m, f"{doc} does not state the published layout {layout.id}"
            for key in ("tp", "cp", "ep", "pp", "vpp"):
                stated_value = int(m[key]) if m[key] else None
                assert stated_value == c.get(key), f"{doc}: {layout.id} {key}"
            assert (int(m["dp"]), int(m["edp"])) == (layout.expect.dp, layout.expect.edp)


def test_no_layout_is_written_in_an_unchecked_form():
    for doc, units in documents().items():
        for unit in units:
            rest = LAYOUT.sub("", unit)
            assert not LAYOUT_SHAPED.search(rest), f"{doc}: write layouts in the checked form: {unit}"


def test_cp_statements_match_size_cp():
    found = matches(SIZE_CP)
    assert len({m.group(0) for _, m in found}) >= 5
    for doc, m in found:
        result = TOOL["size_cp"].call(
            {"model": m["model"], "gpu": m["gpu"], "seq_len": int(m["seq"]), "tp": int(m["tp"])}
        )
        hierarchy = [int(m["a2a"]), int(m["p2p"])] if m["a2a"] else None
        stated = (int(m["cp"]), m["comm"], hierarchy)
        assert (result.cp, result.cp_comm_type, result.hierarchical_cp_sizes) == stated, (
            f"{doc}: {m.group(0)}"
        )


def _layout_config(layout_id: str, precision: str | None = None) -> dict:
    assert layout_id in LAYOUTS, f"{layout_id} is not a layout of engine/layouts.yaml"
    config = dict(LAYOUTS[layout_id].config)
    if precision:
        config["precision"] = precision
    return config


def test_memory_statements_match_estimate_memory():
    found = matches(MEMORY)
    assert {m["layout"] for _, m in found} == set(LAYOUTS)
    for doc, m in found:
        result = TOOL["estimate_memory"].call(_layout_config(m["layout"], m["precision"]))
        assert result.peak_gib == pytest.approx(float(m["gib"]), abs=0.05), f"{doc}: {m.group(0)}"


def test_pick_recompute_statements_match_the_picker():
    found = matches(PICK)
    assert found
    for doc, m in found:
        config = _layout_config(m["layout"])
        for key in ("recompute_granularity", "recompute_modules"):
            config.pop(key, None)
        config["optimizer_cpu_offload_fraction"] = 0.0
        result = TOOL["pick_recompute"].call(config)
        if m["labels"] == "full recompute":
            assert result.recompute_granularity == "full", f"{doc}: {m.group(0)}"
        else:
            assert result.recompute_modules == re.findall(r"`(\w+)`", m["labels"]), f"{doc}: {m.group(0)}"
        assert result.peak_gib_before == pytest.approx(float(m["before"]), abs=0.05)
        assert result.peak_gib_after == pytest.approx(float(m["after"]), abs=0.05)


def _readme_units() -> list[str]:
    return _units_of_markdown((ROOT / "README.md").read_text(encoding="utf-8"))


def _in_readme_and_docs(pattern: re.Pattern) -> list[tuple[str, re.Match]]:
    return matches(pattern) + [("README.md", m) for u in _readme_units() for m in pattern.finditer(u)]


def test_throughput_statements_match_estimate_throughput():
    found = matches(THROUGHPUT)
    assert found
    for doc, m in found:
        result = TOOL["estimate_throughput"].call(_layout_config(m["layout"]))
        assert result.tflops_per_gpu == pytest.approx(float(m["tflops"]), abs=0.05), f"{doc}: {m.group(0)}"


def test_headroom_batch_and_stated_error_match_the_tools():
    """README and SKILL.md state the headroom default, the default global batch and the stated error."""
    from moe_long_context.engine.stated_error import stated_error, stated_errors
    from moe_long_context.tools.plan_search import default_gbs

    for pattern in (HEADROOM, DEFAULT_BATCH, STATED):
        assert {"README.md", "SKILL.md"} <= {doc for doc, _ in _in_readme_and_docs(pattern)}, pattern.pattern
    for doc, m in _in_readme_and_docs(HEADROOM):
        for tool in ("plan_layout", "pick_recompute"):
            assert TOOL[tool].request.model_fields["headroom"].default * 100 == int(m["pct"]), doc
    for doc, m in _in_readme_and_docs(DEFAULT_BATCH):
        assert default_gbs(int(m["seq"])) == int(m["gbs"]) == 2**23 // int(m["seq"]), doc
        assert default_gbs(int(m["seq2"])) == int(m["gbs2"]) == 32, doc  # 2^23 / 200000 = 41, a prime: not it
    for doc, m in _in_readme_and_docs(FAMILY_ERROR):
        assert m["family"] in stated_errors()["throughput"]["by_family"], f"{doc}: {m.group(0)}"
        assert int(m["pct"]) == round(stated_error("throughput", m["family"]) * 100), f"{doc}: {m.group(0)}"
    # a job with no published layout is planned at that default batch
    r = TOOL["plan_layout"].call({"model": "qwen3-30b-a3b", "gpu": "h100", "num_gpus": 16, "seq_len": 131072,
                                  "top_n": 1})  # fmt: skip
    assert r.gbs == default_gbs(131072) and all(p.settings["gbs"] == r.gbs for p in r.plans)


def test_gpu_capacities_match_the_catalog():
    found = matches(CAPACITY)
    assert found
    for doc, m in found:
        assert load_gpu(m["gpu"].lower()).usable_hbm_gib == float(m["gib"]), f"{doc}: {m.group(0)}"


def test_every_gib_figure_in_skill_and_card_is_a_checked_statement():
    for doc in ("SKILL.md", "card.yaml"):
        for unit in documents()[doc]:
            rest = CAPACITY.sub("", PICK.sub("", MEMORY.sub("", unit)))
            assert not re.search(r"\d GiB", rest), f"{doc}: a GiB figure no test checks: {unit}"


def test_shard_targets_match_size_cp():
    """The sentence "about 4096 tokens per shard on 8-GPU NVLink systems and about 8192 on NVL72" uses the engine's targets."""
    said = re.compile(
        r"about (?P<nvlink8>\d+) tokens(?: per shard)? on 8-GPU NVLink systems and about (?P<nvl72>\d+) on NVL72"
    )
    found = matches(said)
    assert {doc for doc, _ in found} >= {"SKILL.md", "card.yaml", "references/cp-sizing.md"}
    for doc, m in found:
        assert int(m["nvlink8"]) == shard_target(load_gpu("h100")), doc
        assert int(m["nvl72"]) == shard_target(load_gpu("gb200")), doc


def test_stated_layer_counts_match_the_catalog():
    text = " ".join(documents()["SKILL.md"])
    m = re.search(r"(\d+) layers \(DeepSeek-V3, Kimi-K2\) and (\d+) \(Qwen3-235B\)", text)
    assert m, "SKILL.md no longer states the layer counts this test checks"
    assert load_model("deepseek-v3").num_layers == load_model("kimi-k2").num_layers == int(m[1])
    assert load_model("qwen3-235b-a22b").num_layers == int(m[2])
    assert "multiplies to 8192 on 256 GPUs" in text
    dsv3 = LAYOUTS["deepseek-v3-128k-h100"].config
    assert dsv3["tp"] * dsv3["cp"] * dsv3["ep"] * dsv3["pp"] == 8192 and dsv3["num_gpus"] == 256


# ---------------------------------------------------------------- labels, modules, flags and keys
def _label_lists(pattern: str) -> list[tuple[str, str, list[str]]]:
    """(doc, unit, labels) for each backticked list that follows ``pattern``."""
    lists = re.compile(r"\b" + pattern + r"((?:`[\w]+`(?:,? (?:and |or )?)?)+)", re.I)
    return [
        (doc, unit, re.findall(r"`(\w+)`", m.group(1)))
        for doc, units in documents().items()
        for unit in units
        for m in lists.finditer(unit)
    ]


def test_recompute_labels_are_ones_megatron_accepts():
    found = _label_lists(
        r"(?:recompute|recomputes|recompute_modules|Megatron Core's|takes exactly|tried cheapest first):? "
    )
    assert len(found) >= 8
    for doc, unit, labels in found:
        bad = [label for label in labels if label not in RECOMPUTE_MODULES]
        assert not bad or WRONG.search(unit), f"{doc}: {bad} are not Megatron Core labels: {unit}"


def test_cuda_graph_modules_are_ones_megatron_accepts():
    found = _label_lists(r"(?:CUDA graphs|capture|cuda_graph_modules`? (?:\(.*?\) )?takes) ")
    assert len(found) >= 4
    allowed = {
        *CUDA_GRAPH_MODULES,
        *typing.get_args(CudaGraphImpl),
    }  # "CUDA graphs `transformer_engine` with ..."
    for doc, unit, modules in found:
        assert set(modules) <= allowed, f"{doc}: {unit}"


def test_informal_labels_appear_only_where_called_wrong():
    seen = set()
    for doc, units in documents().items():
        for unit in units:
            for m in INFORMAL.finditer(unit):
                seen.add(m["label"])
                assert WRONG.search(unit), f"{doc} uses {m['label']!r} without saying it is wrong: {unit}"
    assert seen == set(ORIGINAL_SKILL_LABELS)  # the skill does warn about both
    # ... and names the labels the engine's lint substitutes for them
    skill = " ".join(documents()["SKILL.md"])
    for label in ORIGINAL_SKILL_LABELS:
        assert f"`{INFORMAL_LABELS[label]}`" in skill


def test_product_rule_appears_only_where_called_wrong():
    found = matches(PRODUCT_RULE)
    assert {doc for doc, _ in found} >= {"SKILL.md", "card.yaml"}  # the skill does warn about it
    for doc, units in documents().items():
        for unit in units:
            if PRODUCT_RULE.search(unit):
                assert WRONG.search(unit), f"{doc} states the product rule without calling it wrong: {unit}"


@cache
def bridge_keys() -> set[str]:
    fields = dialects.dialect_table()["fields"]
    return {key for name in fields for key in dialects.keys_for(name)} | {"mixed_precision"}


@cache
def megatron_flags() -> dict[str, dict]:
    return dialects.megatron_flags()


def test_config_keys_are_ones_the_engine_knows():
    keys = [(doc, key) for doc, m in matches(BACKTICKED) for key in [m[1]]
            if re.fullmatch(r"(model|train|optimizer|ddp|dataset|rerun_state_machine|comm_overlap)\.\w+", key)]  # fmt: skip
    keys += [("card.yaml", key) for key in card()["config_keys"]]
    assert len(keys) >= 20
    for doc, key in keys:
        assert key in bridge_keys(), f"{doc}: {key} is not a Megatron Bridge key the engine maps"


def test_megatron_lm_flags_exist_in_megatron_lm():
    flags = [
        (doc, token.split()[0])
        for doc, m in matches(BACKTICKED)
        for token in [m[1]]
        if token.startswith("--")
    ]
    flags += [(doc, f) for doc, units in documents().items() for unit in units
              for f in re.findall(r"(?<![\w`-])(--[a-z][\w-]+)", unit)]  # fmt: skip
    assert len(flags) >= 5
    for doc, flag in flags:
        if flag in {"--json", "--report", "--megatron-args", "--bridge-overrides"}:  # the moe-lc CLI's own
            continue
        assert flag in megatron_flags(), f"{doc}: {flag} is not a Megatron-LM core_r0.19.0 flag"


def _literal_values(annotation) -> set[str]:
    """The strings a (possibly optional or list-of) Literal annotation allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return {v for v in typing.get_args(annotation) if isinstance(v, str)}
    return {v for arg in typing.get_args(annotation) for v in _literal_values(arg)}


@cache
def vocabulary() -> set[str]:
    """Every name the engine, its tools and Megatron-LM's parser know."""
    words: set[str] = set(model_ids()) | set(gpu_ids()) | set(LAYOUTS) | set(rule_table())
    words |= set(RECOMPUTE_MODULES) | set(CUDA_GRAPH_MODULES) | bridge_keys() | set(LORA_TARGETS)
    for tool in TOOLS:
        words |= (
            {tool.name, f"moe-lc {tool.command}"}
            | _nested_fields(tool.result)
            | set(tool.request.model_fields)
        )
    words |= {f"moe-lc {c}" for c in ("models", "gpus", "rules", "serve", "docs", "plan", "lint")}
    for name, field in TrainingConfig.model_fields.items():
        words |= {name, *_literal_values(field.annotation)}
    for flag, spec in megatron_flags().items():
        words |= {flag, spec.get("dest", "")} | {str(c) for c in spec.get("choices") or []}
    words |= {preset["bridge"] for preset in dialects.dialect_table()["precision"].values()}
    words |= {key.split(".", 1)[1] for key in bridge_keys() if "." in key}
    words |= {"moe-lc", "moe-lc://layouts", "moe-lc://layouts/ID"} | {severity.value for severity in Severity}
    words |= {f"moe-lc://layouts/{layout_id}" for layout_id in LAYOUTS}  # one layout's arguments (a resource)
    words |= {"model_type", *supported_model_types()}  # the config.json families SKILL.md lists
    words |= _cli_options(build_parser())
    return words


def _nested_fields(model) -> set[str]:
    """A result's field names and those of the models it nests (a plan inside plan_layout's result)."""
    names = set(model.model_fields)
    for field in model.model_fields.values():
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(arg, type) and hasattr(arg, "model_fields") and arg is not model:
                names |= set(arg.model_fields)
    return names


def _cli_options(parser) -> set[str]:
    """Every option string of the moe-lc CLI and its sub-commands."""
    options = {s for action in parser._actions for s in action.option_strings}
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        for sub in choices.values() if isinstance(choices, dict) else ():
            if hasattr(sub, "_actions"):
                options |= _cli_options(sub)
    return options


# Backticked text that is notation, not a name: formulas and the layout-string grammar, Megatron's source
# folders (the citations' roots), a shape, the syntax of overrides and the typical command a user pastes.
NOTATION = {
    "seq % (2 x CP) == 0", "seq % (CP x TP) == 0", "[seq/CP (/TP with sequence parallelism), MBS, hidden]",
    "E", "t", "m", "L", "|", "(...)*n", "x*n", "-", "key=value", "torchrun ... pretrain_gpt.py",
    "megatron/core/", "megatron/training/", "megatron/bridge/", "engine/layouts.yaml",
    "initialize_model_parallel",  # Megatron Core's parallel_state function, cited as the check's home
}  # fmt: skip


def test_every_backticked_name_is_known_to_the_engine():
    for doc, m in matches(BACKTICKED):
        token = m[1]
        if token in vocabulary() or token in NOTATION or token in ORIGINAL_SKILL_LABELS:
            continue  # those two are checked by test_informal_labels_appear_only_where_called_wrong
        head = token.split()[0]
        command = " ".join(token.split()[:2])
        if (token.startswith("moe-lc ") and command in vocabulary()) or head in vocabulary():
            continue  # a command or flag with its arguments
        if "=" in token and token.split("=", 1)[0] in dialects.dialect_table()["environment"]:
            continue  # an environment variable the checks read
        if re.fullmatch(r"[Et(|)*\dmL]+", token):
            parse_layout(token)  # a pipeline layout string: it must parse
            continue
        pytest.fail(f"{doc}: `{token}` is not a name the engine knows")


def test_snake_case_names_in_the_card_are_known():
    """The card writes labels and keys without backticks: each snake_case word must be a known name."""
    for unit in _units_of_card(skip=("evidence",)):  # evidence names source files and branches
        for word in re.findall(r"(?<![\w.'/-])[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*(?![\w'])", unit):
            if "_" not in word or word.endswith(".py"):
                continue
            if word in ORIGINAL_SKILL_LABELS:
                assert WRONG.search(unit), unit
                continue
            assert word in vocabulary() or word == card()["title"] or word in _card_field_names(), (
                f"card.yaml: {word}"
            )


def _card_field_names() -> set[str]:
    """The card schema's own field names (validation_status entries, failure-mode names and fields)."""
    c = card()
    names = set(c["validation_status"]) | set(c["training_dimensions"]) | set(c["interactions"]) | STATUS
    names |= {entry["name"] for entry in c["failure_modes"]} | {"likely_cause", "min_gpus"}
    return names


# ---------------------------------------------------------------- citations and the card schema
def test_every_claim_in_references_cites_a_source():
    """Each bullet of a topic page carries a [MCore ...], [LM ...], [Bridge ...], [TE ...] or [tool: ...] tag."""
    for page in TOPIC_PAGES:
        bullets = [u for u in _units_of_markdown(page.read_text(encoding="utf-8")) if u.startswith("- ")]
        assert len(bullets) >= 5, page.name
        for bullet in bullets:
            ends_in_sublist = bullet.rstrip().endswith(":")
            assert CITATION.search(bullet) or ends_in_sublist, f"references/{page.name}: no source: {bullet}"


CARD_FIELDS = (
    "title", "validated_on", "summary", "validation_status", "training_dimensions", "sizing_rules",
    "enable_when", "avoid_when", "interactions", "config_keys", "cp_scaling_data", "failure_modes",
    "known_limitations", "evidence",
)  # fmt: skip
STATUS = {"code_verified", "measured", "unclear", "documented", "inferred"}


def test_card_follows_the_nvidia_card_schema():
    c = card()
    assert list(c)[: len(CARD_FIELDS)] == list(CARD_FIELDS) or set(CARD_FIELDS) <= set(c)
    assert all(set(values) <= STATUS for values in c["validation_status"].values())
    for dimension in c["training_dimensions"].values():
        assert set(dimension) == {"effect", "confidence", "rationale"} and dimension["confidence"] in {
            "low", "medium", "high"}  # fmt: skip
    assert set(c["interactions"]) == {"required", "conditional", "incompatible"}
    for mode in c["failure_modes"]:
        assert set(mode) == {"name", "symptom", "likely_cause", "fix"}
    for point in c["cp_scaling_data"]:  # public measurements only
        assert point.get("source", "").startswith("http"), point
    assert c["evidence"] and all(isinstance(e, str) for e in c["evidence"])


def test_skill_card_has_the_model_card_sections():
    text = (ROOT / "skill-card.md").read_text(encoding="utf-8")
    for heading in ("Description", "Owner", "License/Terms of Use", "Use Case", "Known Risks and Mitigations",
                    "Reference(s)", "Skill Output", "Evaluation Tasks", "Evaluation Results"):  # fmt: skip
        assert re.search(rf"^#+ {re.escape(heading)}$", text, re.M), heading
    assert not (ROOT / "skill-card.md.sig").exists()  # no signature the project cannot produce
