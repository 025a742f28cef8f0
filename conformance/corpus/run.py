"""``make conformance``'s corpus part: lint_config against upstream's verdict on every stored corpus entry.

Usage (inside the conformance environment)::

    python -m conformance.corpus.run --megatron build/conformance/mcore --bridge build/conformance/bridge \
        --out build/conformance

Each judged entry is judged again by upstream (a verdict that differs from the stored one means the corpus
is stale: ``make corpus``), linted, and compared (``agree.compare``); each correction lint_config hands back
is judged by upstream too. Output: ``corpus_report.txt`` and ``corpus_report.json`` in ``--out``. Exit 1 when
an entry disagrees and ``allowlist.yaml`` (next to this file) gives no reason for it.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import yaml

from moe_long_context.engine.rules.table import rule_table

from . import corpus
from .agree import compare, late_checks, lint_entry, parse_launch
from .build import _oracle, judge

ALLOWLIST = Path(__file__).resolve().parent / "allowlist.yaml"
_NOT_JUDGED_UPSTREAM = {"MEMORY_OVER_BUDGET"}  # the memory model: no CPU stage can raise it


def load_allowlist() -> list[dict]:
    items = yaml.safe_load(ALLOWLIST.read_text()) or [] if ALLOWLIST.is_file() else []
    for item in items:
        if not item.get("reason") or not item.get("id"):
            raise ValueError(
                f"{ALLOWLIST.name}: every entry needs an id pattern and a written reason: {item}"
            )
    return items


def _allowed(entry_id: str, allowlist: list[dict]) -> str | None:
    return next((a["reason"].strip() for a in allowlist if fnmatch.fnmatchcase(entry_id, a["id"])), None)


def _same(a: dict, b: dict) -> bool:
    first_a, first_b = a.get("first_failure") or {}, b.get("first_failure") or {}
    return a["status"] == b["status"] and first_a.get("where") == first_b.get("where")


def check_correction(oracle, entry, result) -> tuple[str | None, str | None]:
    """(upstream's verdict on the corrected launch, a problem) for a lint result that hands back fixes."""
    if not result.fixes:
        return None, None
    if entry["kind"] == "megatron-lm":
        env, argv = parse_launch(result.corrected)
        fixed = {**entry, "env": env, "argv": argv}
    else:
        items = result.corrected if isinstance(result.corrected, list) else result.corrected.split()
        fixed = {**entry, "overrides": items}
    verdict = judge(oracle, fixed)
    again = lint_entry(fixed)  # the corrected launch as lint_config reads it (its own dialect)
    if isinstance(again, Exception):
        return verdict["status"], f"lint_config refuses its own correction: {again}"
    remaining = sorted(
        {f.code for f in again.findings if f.severity == "error"} - _NOT_JUDGED_UPSTREAM - set(late_checks())
    )
    first = verdict.get("first_failure") or {}
    if verdict["status"] == "rejected" and not remaining:
        return "rejected", f"correction fails upstream: {first.get('stage')} {first.get('where')}: " + str(
            first.get("message")
        )[:200]
    if verdict["status"] == "accepted" and remaining:
        return "accepted", f"correction passes upstream but lint_config says errors remain: {remaining}"
    return verdict["status"], None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--megatron", type=Path, required=True)
    p.add_argument("--bridge", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    started = time.monotonic()
    allowlist = load_allowlist()
    oracle = _oracle(args.megatron, args.bridge)
    rules = {code: r.source for code, r in rule_table().items()}
    late = late_checks()
    rows, skipped, counts = [], Counter(), Counter()
    for name in corpus.FILES:
        for entry in corpus.load(name)["entries"]:
            reason = corpus.why_not_judged(entry)
            if reason is not None:
                skipped[(name, reason.split(":")[0] if reason.startswith("not built") else reason)] += 1
                continue
            stored = entry.get("verdict")
            fresh = judge(oracle, entry)
            entry = {**entry, "verdict": fresh}
            if fresh["status"] == "unresolved":
                skipped[(name, "needs variables a non-public pipeline sets")] += 1
                continue
            if entry["kind"] == "bridge":
                entry["model"] = corpus.lint_model(entry)
            result = lint_entry(entry)
            a = compare(entry, result, rules, late)
            if stored is None or not _same(stored, fresh):
                a.problems.append("the stored verdict is stale (make corpus)")
            if not isinstance(result, Exception):
                a.corrected_verdict, problem = check_correction(oracle, entry, result)
                if problem:
                    a.problems.append(problem)
            row = {**asdict(a), "source": name, "allowed": _allowed(a.id, allowlist) if a.problems else None}
            rows.append(row)
            counts[(name, a.upstream, a.engine)] += 1
    bad = [r for r in rows if r["problems"] and not r["allowed"]]
    allowed = [r for r in rows if r["problems"] and r["allowed"]]
    summary = _summary(rows)
    lines = [
        f"Corpus: {len(rows)} judged entries (upstream's own launches), lint_config against upstream's verdict",
        f"time: {time.monotonic() - started:.1f} s",
        "",
        f"{'source':<12}{'entries':>8}{'accepted':>9}{'rejected':>9}{'refused ok':>11}{'caught':>7}"
        f"{'valid refused':>14}{'false errors':>13}{'missed':>7}{'corrections':>12}{'pass':>5}",
    ]
    for name, s in summary.items():
        lines.append(f"{name:<12}{s['entries']:>8}{s['accepted']:>9}{s['rejected']:>9}{s['rejected_refused']:>11}"
                     f"{s['rejected_caught']:>7}{s['valid_refused']:>14}{s['false_errors']:>13}{s['missed']:>7}"
                     f"{s['corrections']:>12}{s['corrections_pass']:>5}")  # fmt: skip
    lines += [
        "",
        "Accepted entries with engine errors upstream checks after configuration (conformance/allowlist.yaml "
        f"runtime-/te-/build- entries): {summary['all']['late_checks']}",
    ]
    lines += [
        f"  {r['id']}: {', '.join(r['late'])}" for r in rows if r["upstream"] == "accepted" and r["late"]
    ]
    lines += ["", "Not judged (entries and reason):"]
    lines += [f"  {n:>4}  {src}: {why}" for (src, why), n in sorted(skipped.items())]
    lines += ["", f"Disagreements allowed by allowlist.yaml: {len(allowed)}"]
    for r in allowed:
        lines.append(f"  {r['id']}: {'; '.join(r['problems'])[:300]}  [{r['allowed']}]")
    lines += ["", f"Disagreements: {len(bad)}"]
    for r in bad:
        lines.append(f"  {r['id']} (upstream {r['upstream']}, engine {r['engine']} {r['engine_errors']})")
        lines += [f"      - {pr}" for pr in r["problems"]]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "corpus_report.txt").write_text(text)
    report = {"summary": summary, "entries": rows, "not_judged": [
        {"source": s, "reason": why, "entries": n} for (s, why), n in sorted(skipped.items())]}  # fmt: skip
    (args.out / "corpus_report.json").write_text(
        json.dumps(report, indent=1, sort_keys=True, default=str) + "\n"
    )
    print(text if len(text) < 20000 else text[:20000] + "\n... (see corpus_report.txt)")
    return 1 if bad else 0


def _summary(rows: list[dict]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name in [*corpus.FILES, "all"]:
        group = [r for r in rows if name == "all" or r["source"] == name]
        out[name] = {
            "entries": len(group),
            "accepted": sum(r["upstream"] == "accepted" for r in group),
            "rejected": sum(r["upstream"] == "rejected" for r in group),
            "rejected_refused": sum(
                r["upstream"] == "rejected" and r["engine"] == "refused" and not r["problems"] for r in group
            ),
            "rejected_caught": sum(
                r["upstream"] == "rejected"
                and r["engine"] == "error"
                and not any("missed" in p for p in r["problems"])
                for r in group
            ),
            "valid_refused": sum(
                any(p.startswith("valid entry refused") for p in r["problems"]) for r in group
            ),
            "false_errors": sum(any(p.startswith("false error") for p in r["problems"]) for r in group),
            "missed": sum(
                any(p.startswith(("missed", "refused, but")) for p in r["problems"]) for r in group
            ),
            "late_checks": sum(r["upstream"] == "accepted" and bool(r["late"]) for r in group),
            "corrections": sum(r["corrected_verdict"] is not None for r in group),
            "corrections_pass": sum(r["corrected_verdict"] == "accepted" for r in group),
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
