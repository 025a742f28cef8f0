"""The upstream inventory: the generator on known source text, and the committed classification's consistency.

The regeneration from the pinned wheels runs in ``make conformance`` (conformance/inventory_check.py); here the
generator is checked on small sources with a known answer, and upstream.yaml against rules.yaml and itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conformance.inventory import TE_SNAPSHOT, Scope, file_checks, fingerprint, load_scope
from conformance.inventory_check import compare

from moe_long_context.engine.rules import rule_table
from moe_long_context.engine.rules.upstream import (
    STATUSES,
    _open_inventory,
    checked,
    upstream_checks,
    upstream_reasons,
)

SCOPE = Scope(files=[], te_ref="v", te_commit="c", call_keys={"torch.distributed.get_world_size": "world_size"},
              config_roots=("self", "args", "config", "self.config"))  # fmt: skip
ENTRY = {"repo": "LM", "file": "megatron/training/arguments.py", "tag": "lm-args", "roots": ["validate_args"]}

SOURCE = """
import os

def validate_args(args, defaults={}):
    world = torch.distributed.get_world_size()
    if args.mtp_num_layers:
        assert args.position_embedding_type == "rope", f"no {args.position_embedding_type}"
    if args.fp8 and args.fp4:
        raise ValueError("pick one")
    elif args.fp4:
        _helper(args)
    if world % args.tensor_model_parallel_size:
        raise RuntimeError("world")
    if os.getenv("NVTE_CPU_OFFLOAD_V1", "0") != "1":
        return
    assert args.fine_grained_activation_offloading

def _helper(args):
    size = args.hidden_size
    assert size % 16 == 0, "hidden"

def unused(args):
    assert args.never
"""


def _checks(text: str = SOURCE):
    return file_checks(text, ENTRY, SCOPE)


def test_every_assert_and_raise_of_the_root_and_its_helpers_with_guard_test_and_keys():
    checks = _checks()
    got = [(c.line, c.function, c.kind, c.guard, c.test, c.keys, c.when) for c in checks]
    assert got == [
        (7, "validate_args", "assert", "args.mtp_num_layers", "args.position_embedding_type == 'rope'",
         ("mtp_num_layers", "position_embedding_type"), ("mtp_num_layers",)),
        (9, "validate_args", "raise", "args.fp8 and args.fp4", "", ("fp4", "fp8"), ("fp4", "fp8")),
        (13, "validate_args", "raise", "world % args.tensor_model_parallel_size", "",
         ("tensor_model_parallel_size", "world_size"), ("tensor_model_parallel_size", "world_size")),
        # after an early return: its negation guards what follows, and the environment variable is a key
        (16, "validate_args", "assert", "not os.getenv('NVTE_CPU_OFFLOAD_V1', '0') != '1'",
         "args.fine_grained_activation_offloading", ("env:NVTE_CPU_OFFLOAD_V1", "fine_grained_activation_offloading"),
         ("env:NVTE_CPU_OFFLOAD_V1",)),
        # the helper validate_args calls (a local resolved to the key it was read from); `unused` is not reached
        (20, "_helper", "assert", "", "size % 16 == 0", ("hidden_size",), ("hidden_size",)),
    ]  # fmt: skip
    assert checks[1].first_line == 8  # an `if cond: raise` is cited from its if
    assert checks[0].message == "f'no {args.position_embedding_type}'"


def test_a_moved_check_keeps_its_fingerprint_and_a_changed_one_does_not():
    moved = _checks("\n\n" + SOURCE)
    assert [c.fingerprint for c in moved] == [c.fingerprint for c in _checks()]
    assert [c.line for c in moved] == [c.line + 2 for c in _checks()]
    changed = _checks(SOURCE.replace('== "rope"', 'in ("rope", "none")'))
    assert changed[0].fingerprint != _checks()[0].fingerprint
    assert changed[1].fingerprint == _checks()[1].fingerprint
    assert fingerprint("assert", "", "x", "") != fingerprint("assert", "", "x", "m")


def _classification(checks):
    entries = [{"id": f"lm-args-{i:03d}", "line": c.line, "function": c.function, "fingerprint": c.fingerprint,
                "status": "not_modelled", "keys": list(c.keys), "requires": f"check {i}"}
               for i, c in enumerate(checks, 1)]  # fmt: skip
    return {
        "reasons": {},
        "files": [{"file": ENTRY["file"], "repo": "LM", "tag": "lm-args", "checks": entries}],
    }


def test_the_comparison_names_what_moved_changed_appeared_and_went():
    base = _checks()
    classified = _classification(base)
    assert compare(base, classified, {ENTRY["file"]}).problems == []
    # moved two lines down
    report = compare(_checks("\n\n" + SOURCE), classified, {ENTRY["file"]})
    assert report.problems[0] == f"{ENTRY['file']}: lm-args-001 moved from line 7 to 9"
    assert len(report.moved) == 5 and not report.changed and not report.new
    # a changed condition: paired with the old entry, both shown
    report = compare(_checks(SOURCE.replace('== "rope"', 'in ("rope", "none")')), classified, {ENTRY["file"]})
    assert (
        len(report.changed) == 1
        and "lm-args-001 (line 7, not_modelled: check 1) changed into" in report.problems[0]
    )
    assert "args.position_embedding_type in ('rope', 'none')" in report.problems[0]
    # a new check and a removed one
    text = SOURCE.replace('    assert size % 16 == 0, "hidden"\n', "").replace(
        "def validate_args(args, defaults={}):\n",
        "def validate_args(args, defaults={}):\n    assert args.new_flag\n",
    )
    report = compare(_checks(text), classified, {ENTRY["file"]})
    assert [c.test for c in report.new] == ["args.new_flag"]
    assert [e["id"] for e in report.gone] == ["lm-args-005"]
    assert any(p.startswith("unclassified new check: assert at") for p in report.problems)
    assert any("lm-args-005 (line 20) no longer exists" in p for p in report.problems)


# --------------------------------------------------------------------------- the classification

CHECKS = upstream_checks()
RULES = rule_table()
_CITE = re.compile(
    r"(?:\b(LM|MCore|Bridge|TE)\b(?: v2\.14)? )?(?:([\w/.]+\.(?:py|cu|cpp)))?:(\d+)(?:-(\d+))?((?:,\s?:?\d+(?:-\d+)?)*)"
)
_PREFIX = {"LM": "megatron/training/", "MCore": "megatron/core/", "Bridge": "megatron/bridge/",
           "TE": "transformer_engine/pytorch/"}  # fmt: skip


def cited_ranges(source: str) -> list[tuple[str | None, str, int, int]]:
    """(repo, path, first, last) of every file:line range a rule's source cites (':1401-1402' continues the file)."""
    out = []
    for segment in source.split(";"):
        repo = path = None
        head = re.match(r"\s*(LM|MCore|Bridge|TE)\b", segment)
        repo = head.group(1) if head else None
        for m in _CITE.finditer(segment):
            repo = m.group(1) or repo
            path = m.group(2) or path
            if path is None:
                continue
            ranges = [(int(m.group(3)), int(m.group(4) or m.group(3)))]
            ranges += [(int(a), int(b or a)) for a, b in re.findall(r"(\d+)(?:-(\d+))?", m.group(5) or "")]
            out += [(repo, path, a, b) for a, b in ranges]
    return out


def _cites(check, source: str) -> bool:
    for repo, path, first, last in cited_ranges(source):
        if repo and repo != check.repo:
            continue
        if (check.file.endswith("/" + path) or check.file == path) and first <= check.line <= last:
            return True
    return False


def test_cited_ranges_reads_the_rule_sources():
    assert cited_ranges("LM arguments.py:1393-1399 (SP off), :1401-1402 (assert); MCore a/b.py:7") == [
        ("LM", "arguments.py", 1393, 1399), ("LM", "arguments.py", 1401, 1402), ("MCore", "a/b.py", 7, 7)]  # fmt: skip
    assert cited_ranges("Bridge models/gemma/gemma4_provider.py:54-55,71 x") == [
        ("Bridge", "models/gemma/gemma4_provider.py", 54, 55), ("Bridge", "models/gemma/gemma4_provider.py", 71, 71)]  # fmt: skip


def test_every_entry_is_classified_with_what_its_status_needs():
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids)), "duplicate ids"
    reasons = upstream_reasons()
    for c in CHECKS:
        assert c.status in STATUSES, f"{c.id}: status {c.status!r}"
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*-\d{3}", c.id), c.id
        assert c.requires.strip(), f"{c.id}: no words for what it requires"
        if c.status == "modelled":
            assert c.rules and all(r in RULES for r in c.rules), f"{c.id}: rules {c.rules}"
            assert c.reason is None
        elif c.status == "not_applicable":
            assert c.reason in reasons, f"{c.id}: reason {c.reason!r}"
            assert not c.rules
        else:
            assert not c.rules and c.reason is None, c.id
            assert c.when, f"{c.id}: a not-modelled check needs the keys that reach it"


def test_a_modelled_check_is_cited_by_its_rule_at_its_line():
    """The rule's source in rules.yaml names the file and a line range holding every check it models."""
    wrong = [f"{c.id} {c.source}: {code}" for c in CHECKS if c.status == "modelled" for code in c.rules
             if not _cites(c, RULES[code].source)]  # fmt: skip
    assert not wrong, "rules.yaml sources that do not cite the check they model:\n" + "\n".join(wrong)


def test_every_error_rule_with_an_upstream_source_models_an_inventory_check():
    referenced = {code for c in CHECKS for code in c.rules}
    missing = []
    for code, rule in RULES.items():
        if rule.severity.value != "error" or rule.source.startswith("engine"):
            continue
        in_scope = [r for r in cited_ranges(rule.source) if any(c.file.endswith("/" + r[1]) for c in CHECKS)]
        if in_scope and code not in referenced:
            missing.append(code)
    assert not missing, f"error rules citing inventory files but modelling no check: {missing}"


def test_the_stored_te_records_match_the_classification():
    records = json.loads(Path(TE_SNAPSHOT).read_text())["checks"]
    te = [c for c in CHECKS if c.repo == "TE"]
    assert [(r["file"], r["line"], r["fingerprint"]) for r in records] == [
        (c.file, c.line, c.fingerprint) for c in te
    ]


def test_the_scope_names_every_file_of_the_classification():
    """Every classified file is in the scope (a scope file may hold no check, e.g. Bridge's TransformerConfig.finalize)."""
    scope = load_scope()
    assert {c.file for c in CHECKS} <= {f["file"] for f in scope.files}
    assert scope.te_commit == "f031cf87bd054c7558b887df7bed93975456667f"


def test_the_line_reader_of_judging_tools_agrees_with_the_full_parse():
    """Judging tools read only the not-modelled lines of upstream.yaml; they must see what the full parse does."""
    counts, open_checks = _open_inventory()
    full = upstream_checks()
    assert counts == {s: sum(c.status == s for c in full) for s in STATUSES}
    assert open_checks == tuple(c for c in full if c.status == "not_modelled")
    assert sum(counts.values()) == len(full) == 854
    assert (checked().upstream, checked().applicable) == (397, 412)


@pytest.mark.parametrize("status", STATUSES)
def test_each_status_is_used(status):
    assert any(c.status == status for c in CHECKS)


def test_the_cli_lists_the_inventory(capsys):
    """moe-lc rules --upstream [--json] [--status]: every check with {file, line, function, message, status, rule,
    reason}; none unclassified; a rule for each modelled one, a reason for each one that does not apply."""
    from moe_long_context.cli import main

    assert main(["rules", "--upstream", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(CHECKS) and {r["status"] for r in rows} == set(STATUSES)
    assert {"file", "line", "function", "message", "status", "rule", "reason"} <= set(rows[0])
    assert all(r["rule"] for r in rows if r["status"] == "modelled")
    assert all(r["reason"] for r in rows if r["status"] == "not_applicable")
    assert main(["rules", "--upstream", "--status", "not_modelled"]) == 0
    text = capsys.readouterr().out
    c = next(c for c in CHECKS if c.status == "not_modelled")
    assert f"{c.source}  [not_modelled]" in text and c.requires in text
    assert text.splitlines()[0].startswith(f"{sum(c.status == 'modelled' for c in CHECKS)} of the ")
