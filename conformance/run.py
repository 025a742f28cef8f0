"""``make conformance``: generate the cases, run the engine and Megatron on each, report, fail on surprises.

Usage (inside the environment ``make conformance`` builds)::

    python -m conformance.run --megatron build/conformance/mcore --bridge build/conformance/bridge \
        --out build/conformance [--count 2400] [--seed 20260]

Exit status: 0 when every difference is documented in ``conformance/allowlist.yaml``; 1 when any
case disagrees without an entry (or a Megatron message maps to no family); 2 on a harness error.
``MEGATRON_LM_SRC`` selects the Megatron-LM training layer: unset uses the copy shipped in the
megatron-core wheel, a path uses that source tree, ``none`` reports the megatron-lm cases as not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

from moe_long_context.engine.config import TrainingConfig
from moe_long_context.engine.context import build_context
from moe_long_context.engine.findings import Severity
from moe_long_context.engine.rules import FAMILIES, run

from .compare import Outcome, compare, load_allowlist
from .generate import DEFAULT_COUNT, DEFAULT_SEED, generate
from .oracle import ASSUMPTIONS, HarnessError, Oracle

ROW_ORDER = ("valid", *FAMILIES)


def engine_errors(cfg: TrainingConfig) -> list[str]:
    ctx = build_context(cfg)
    return [f.code for f in run(ctx) if f.severity == Severity.error]


def table(outcomes: list[Outcome]) -> tuple[list[dict], str]:
    rows = []
    by_family: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_family[o.family].append(o)
    for family in [f for f in ROW_ORDER if f in by_family]:
        group = by_family[family]
        ran = [o for o in group if o.status != "not-run"]
        counts = Counter(o.status for o in group)
        verdict_agree = sum(1 for o in ran if bool(o.engine_errors) == bool(o.megatron_failures))
        both = [o for o in ran if o.engine_errors and o.megatron_failures]
        fam_agree = sum(1 for o in both if o.family_match)
        cfg_time = [o for o in ran if o.config_time and o.status != "documented"]
        rows.append(
            {
                "family": family,
                "cases": len(group),
                "run": len(ran),
                "megatron_rejects": sum(1 for o in ran if o.megatron_failures),
                "engine_rejects": sum(1 for o in ran if o.engine_errors),
                "accept_reject_agree": verdict_agree,
                "both_reject": len(both),
                "same_family": fam_agree,
                "documented": counts["documented"],
                "undocumented": counts["disagree"],
                "not_run": counts["not-run"],
                "config_time_cases": len(cfg_time),
                "config_time_agree": sum(1 for o in cfg_time if o.status in ("agree-accept", "agree-reject")),
            }
        )
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k != "family"} if rows else {}
    if rows:
        rows.append({"family": "all", **total})
    header = (
        f"{'family':<11}{'cases':>6}{'run':>6}{'M rej':>7}{'E rej':>7}{'agree':>7}{'%':>7}"
        f"{'both':>6}{'same fam':>9}{'cfg-time agree':>16}{'documented':>11}{'UNDOC':>7}{'not run':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        pct = 100.0 * r["accept_reject_agree"] / r["run"] if r["run"] else 100.0
        cfg = f"{r['config_time_agree']}/{r['config_time_cases']}"
        lines.append(
            f"{r['family']:<11}{r['cases']:>6}{r['run']:>6}{r['megatron_rejects']:>7}{r['engine_rejects']:>7}"
            f"{r['accept_reject_agree']:>7}{pct:>6.1f}%{r['both_reject']:>6}{r['same_family']:>9}{cfg:>16}"
            f"{r['documented']:>11}{r['undocumented']:>7}{r['not_run']:>8}"
        )
    return rows, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron", type=Path, required=True, help="unpacked megatron-core wheel")
    parser.add_argument("--bridge", type=Path, required=True, help="unpacked megatron-bridge wheel")
    parser.add_argument("--out", type=Path, required=True, help="folder for report.txt and report.json")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)

    started = time.monotonic()
    lm_src = os.environ.get("MEGATRON_LM_SRC") or None
    try:
        allowlist = load_allowlist()
        oracle = Oracle(args.megatron, args.bridge, lm_src)
    except (HarnessError, ValueError, FileNotFoundError) as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    setup_s = time.monotonic() - started
    cases = generate(args.count, args.seed)
    outcomes: list[Outcome] = []
    for case in cases:
        cfg = TrainingConfig(**case.config)
        errors = engine_errors(cfg)
        ctx = build_context(cfg)
        try:
            verdict = oracle.check(cfg, ctx.model, ctx.gpu)
        except HarnessError as exc:
            print(f"conformance: case {case.id} ({case.target}): {exc}", file=sys.stderr)
            return 2
        failures = [asdict(f) for f in verdict.failures]
        outcomes.append(
            compare(
                case.id, case.family, case.target, cfg.launcher, errors, failures, verdict.not_run, allowlist
            )
        )
    elapsed = time.monotonic() - started

    rows, text_table = table(outcomes)
    used = Counter(a for o in outcomes for a in o.allowed)
    disagreements = [o for o in outcomes if o.status == "disagree"]
    not_run = [o for o in outcomes if o.status == "not-run"]
    documented = [o for o in outcomes if o.status == "documented"]
    case_by_id = {c.id: c for c in cases}

    lines = [
        f"Conformance: {len(cases)} cases (seed {args.seed}), engine vs Megatron Core 0.19.2 / Megatron-LM "
        "training layer / Megatron Bridge 0.6.2 on CPU",
        f"Megatron-LM: {oracle.env.training_note}",
        f"time: {elapsed:.1f} s ({setup_s:.1f} s to import Megatron)",
        "",
        text_table,
        "",
        "Columns: M rej / E rej = cases Megatron / the engine rejects; agree = same accept/reject; both = both "
        "reject; same fam = of those, the engine names a family Megatron raised; cfg-time agree = agreement on "
        "cases whose Megatron verdict rests on configuration/initialisation-time checks (documented cases "
        "excluded); documented = differences in conformance/allowlist.yaml; UNDOC = undocumented disagreements.",
        "",
        "Documented differences used (allow-list id: cases):",
    ]
    for entry in allowlist:
        lines.append(f"  {entry.id}: {used.get(entry.id, 0)}  [{entry.test}]")
    unused = [a.id for a in allowlist if not used.get(a.id)]
    if unused:
        lines.append(f"  (never needed in this run: {', '.join(unused)})")
    stages = Counter(f["stage"] for o in outcomes for f in o.megatron_failures)
    lines += ["", "Megatron failures by stage (every stage that raised at least once):"]
    lines += [f"  {stage}: {n}" for stage, n in sorted(stages.items())]
    unverified = Counter(code for o in outcomes for code in o.unverified)
    lines += [
        "",
        f"Unverified engine errors: {sum(unverified.values())} in "
        f"{sum(1 for o in outcomes if o.unverified)} cases that Megatron rejects for another rule first "
        "(its checks stop at the first exception of a stage): "
        + (", ".join(f"{c} x{n}" for c, n in unverified.most_common()) or "none"),
    ]
    lines += ["", f"Undocumented disagreements: {len(disagreements)}"]
    for o in disagreements:
        lines.append(f"  {o.case_id} [{o.family}/{o.target}, {o.launcher}] engine={o.engine_errors}")
        for p in o.problems:
            lines.append(f"      - {p}")
        lines.append(f"      config: {json.dumps(case_by_id[o.case_id].config, sort_keys=True)}")
    if not_run:
        lines += ["", f"Not run: {len(not_run)} cases ({not_run[0].not_run[0]})"]
    report_txt = "\n".join(lines) + "\n"

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.txt").write_text(report_txt)
    report = {
        "cases": len(cases),
        "seed": args.seed,
        "elapsed_s": round(elapsed, 1),
        "megatron_lm": oracle.env.training_note,
        "assumptions": ASSUMPTIONS,
        "families": rows,
        "allowlist": [
            {**asdict(a), "cases": used.get(a.id, 0)} for a in allowlist
        ],
        "disagreements": [
            {**asdict(o), "config": case_by_id[o.case_id].config} for o in disagreements
        ],
        "documented": [
            {"id": o.case_id, "target": o.target, "launcher": o.launcher, "allowed": o.allowed,
             "engine_errors": o.engine_errors,
             "megatron": [f"{f['stage']}: {f['message'][:160]}" for f in o.megatron_failures]}
            for o in documented
        ],
        "not_run": [o.case_id for o in not_run],
        "failures_by_stage": dict(stages),
        "unverified": dict(unverified),
        "unverified_cases": [
            {"id": o.case_id, "target": o.target, "launcher": o.launcher, "unverified": o.unverified,
             "megatron": [f"{f['stage']}: {f['message'][:160]}" for f in o.megatron_failures]}
            for o in outcomes if o.unverified
        ],
    }  # fmt: skip
    (args.out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str) + "\n")
    print(report_txt if len(report_txt) < 20000 else report_txt[:20000] + "\n... (see report.txt)")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
