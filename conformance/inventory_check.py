"""``make conformance``: regenerate the upstream inventory and compare it with its classification (upstream.yaml).

Usage (inside the environment ``make conformance`` builds)::

    python -m conformance.inventory_check --megatron build/conformance/mcore --bridge build/conformance/bridge \
        --out build/conformance [--te-repo /path/to/TransformerEngine/git] [--write] [--write-te-snapshot]

Every check the generator finds must have a classified entry with the same function, line, fingerprint and keys;
every entry must still exist. A difference is printed with what changed (the old entry's words next to the new
check's condition and message, read from the wheel) and the exit status is 1. ``--write`` updates moved lines and
keys, and adds new or changed checks as ``unclassified`` (which still fails until someone classifies them).
Transformer Engine's files come from a git mirror at the pinned tag when ``--te-repo`` is given; without it (CI has
no GitHub) the records stored in ``conformance/upstream_te_v2.14.json`` stand for them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .inventory import TE_SNAPSHOT, Check, generate, load_scope, te_snapshot_records

ROOT = Path(__file__).resolve().parents[1]
CLASSIFICATION = ROOT / "tools" / "moe_long_context" / "engine" / "rules" / "upstream.yaml"
STATUSES = ("modelled", "not_applicable", "not_modelled", "unclassified")


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    moved: list[tuple[dict, Check]] = field(default_factory=list)
    changed: list[tuple[dict, Check]] = field(default_factory=list)
    new: list[Check] = field(default_factory=list)
    gone: list[dict] = field(default_factory=list)
    rekeyed: list[tuple[dict, Check]] = field(default_factory=list)


def load_classification(path: Path = CLASSIFICATION) -> dict:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _describe(c: Check) -> str:
    words = f"{c.kind} at {c.file}:{c.line} in {c.function}"
    cond = f"when {c.guard}: " if c.guard else ""
    test = c.test or "(raises)"
    return f"{words}\n      {cond}{test}\n      message: {c.message or '-'}"


def compare(checks: list[Check], classification: dict, files: set[str]) -> Report:
    """Pair generated checks with classified entries, file by file (only the files whose source was read)."""
    report = Report()
    generated: dict[str, list[Check]] = defaultdict(list)
    for c in checks:
        generated[c.file].append(c)
    for f in classification["files"]:
        if f["file"] not in files:
            continue
        entries = list(f["checks"])
        fresh = list(generated.pop(f["file"], []))
        # 1. the same check (function and fingerprint): maybe moved
        for e in list(entries):
            match = [c for c in fresh if c.function == e["function"] and c.fingerprint == e["fingerprint"]]
            if not match:
                continue
            c = min(match, key=lambda c: abs(c.line - e["line"]))
            fresh.remove(c)
            entries.remove(e)
            if c.line != e["line"]:
                report.moved.append((e, c))
                report.problems.append(f"{f['file']}: {e['id']} moved from line {e['line']} to {c.line}")
            if sorted(e.get("keys", [])) != list(c.keys):
                report.rekeyed.append((e, c))
                report.problems.append(
                    f"{f['file']}: {e['id']} reads {list(c.keys)} (classified: {e.get('keys')})"
                )
            if e["status"] == "unclassified":
                report.problems.append(f"{f['file']}: {e['id']} at line {c.line} is unclassified")
        # 2. the same function, a check that changed: nearest line
        for e in list(entries):
            match = [c for c in fresh if c.function == e["function"]]
            if not match:
                continue
            c = min(match, key=lambda c: abs(c.line - e["line"]))
            fresh.remove(c)
            entries.remove(e)
            report.changed.append((e, c))
            report.problems.append(
                f"{f['file']}: {e['id']} (line {e['line']}, {e['status']}: {e['requires']}) changed into\n    "
                + _describe(c)
            )
        report.gone += entries
        report.problems += [f"{f['file']}: {e['id']} (line {e['line']}) no longer exists" for e in entries]
        report.new += fresh
        report.problems += ["unclassified new check: " + _describe(c) for c in fresh]
    for rest in generated.values():  # a file of the scope with no classified entry yet
        report.new += rest
        report.problems += ["unclassified new check: " + _describe(c) for c in rest]
    return report


# --------------------------------------------------------------------------- --write


def _entry(c: Check, number: int, old: dict | None = None) -> dict:
    e = {"id": f"{c.tag}-{number:03d}", "line": c.line, "function": c.function, "fingerprint": c.fingerprint,
         "status": "unclassified", "when": list(c.when), "keys": list(c.keys),
         "requires": (old or {}).get("requires") or f"{c.kind}: {c.guard or '-'} / {c.test or '-'}"}  # fmt: skip
    if old:
        e["id"] = old["id"]
    return e


def apply(classification: dict, report: Report, scope_files: list[dict]) -> dict:
    """The classification with moved lines and keys updated and new or changed checks added as unclassified."""
    by_id = {e["id"]: e for f in classification["files"] for e in f["checks"]}
    for e, c in report.moved:
        by_id[e["id"]]["line"] = c.line
    for e, c in report.rekeyed:
        by_id[e["id"]]["keys"] = list(c.keys)
    for e, c in report.changed:
        by_id[e["id"]].update(_entry(c, 0, e))
    gone = {e["id"] for e in report.gone}
    files = {f["file"]: f for f in classification["files"]}
    for f in files.values():
        f["checks"] = [e for e in f["checks"] if e["id"] not in gone]
    for c in report.new:
        f = files.get(c.file)
        if f is None:
            f = files[c.file] = {"file": c.file, "repo": c.repo, "tag": c.tag, "checks": []}
        taken = [int(e["id"].rsplit("-", 1)[1]) for e in f["checks"]]
        f["checks"].append(_entry(c, max(taken, default=0) + 1))
    order = [s["file"] for s in scope_files]
    for f in files.values():
        f["checks"].sort(key=lambda e: e["line"])
    classification["files"] = sorted(
        files.values(), key=lambda f: order.index(f["file"]) if f["file"] in order else 999
    )
    return classification


def dump(classification: dict) -> str:
    """upstream.yaml's text: its header comment kept, one check a line."""
    text = CLASSIFICATION.read_text().splitlines()
    header = text[: next(i for i, line in enumerate(text) if not line.startswith("#"))]

    def flow(d: dict) -> str:
        return yaml.safe_dump(d, default_flow_style=True, width=10**6, sort_keys=False).strip()

    lines = [*header, "", "reasons:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in classification["reasons"].items()]
    lines.append("files:")
    for f in classification["files"]:
        lines += [f"- file: {f['file']}", f"  repo: {f['repo']}", f"  tag: {f['tag']}", "  checks:"]
        lines += ["  - " + flow(e) for e in f["checks"]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main


def _te_from_snapshot() -> list[Check]:
    records = json.loads(TE_SNAPSHOT.read_text())["checks"]
    return [Check(**{**r, "keys": tuple(r["keys"]), "when": tuple(r["when"]), "test_keys": tuple(r["test_keys"]),
                     "parts": tuple(tuple(p) for p in r["parts"]), "guard": "", "test": "",
                     "values": tuple((k, op, tuple(v)) for k, op, v in r["values"]),
                     "message": "(TE source not read: from the stored snapshot)"}) for r in records]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron", type=Path, required=True, help="unpacked megatron-core wheel")
    parser.add_argument("--bridge", type=Path, required=True, help="unpacked megatron-bridge wheel")
    parser.add_argument("--out", type=Path, required=True, help="folder for upstream_inventory.json")
    parser.add_argument("--te-repo", type=Path, default=None, help="git directory of Transformer Engine")
    parser.add_argument("--write", action="store_true", help="update upstream.yaml (lines, keys, new checks)")
    parser.add_argument(
        "--write-te-snapshot", action="store_true", help="store TE's records (needs --te-repo)"
    )
    args = parser.parse_args(argv)

    scope = load_scope()
    checks, missing = generate(args.megatron, args.bridge, args.te_repo, scope)
    te_note = f"Transformer Engine {scope.te_ref} read from {args.te_repo}"
    if args.te_repo is None:
        checks += _te_from_snapshot()
        te_note = (
            f"Transformer Engine {scope.te_ref}: the stored records ({TE_SNAPSHOT.name}), no source here"
        )
    elif args.write_te_snapshot:
        TE_SNAPSHOT.write_text(json.dumps({"ref": scope.te_ref, "commit": scope.te_commit,
                                           "checks": te_snapshot_records(checks)}, indent=1) + "\n")  # fmt: skip
    unread = [m for m in missing if not m.startswith("transformer_engine/")]
    if unread:
        print(f"inventory: sources not found: {unread}", file=sys.stderr)
        return 2
    classification = load_classification()
    files = {c.file for c in checks} | {s["file"] for s in scope.files}
    report = compare(checks, classification, files)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "upstream_inventory.json").write_text(
        json.dumps({"te": te_note, "checks": [c.record() for c in checks]}, indent=1) + "\n"
    )
    statuses = defaultdict(int)
    for f in classification["files"]:
        for e in f["checks"]:
            statuses[e["status"]] += 1
    print(f"upstream inventory: {len(checks)} checks in {len(files)} files ({te_note})")
    print("classified: " + ", ".join(f"{s} {statuses[s]}" for s in STATUSES if statuses[s]))
    if args.write:
        CLASSIFICATION.write_text(dump(apply(classification, report, scope.files)))
        print(f"wrote {CLASSIFICATION.relative_to(ROOT)}")
    if report.problems:
        print(f"\n{len(report.problems)} difference(s) between the sources and upstream.yaml:")
        for p in report.problems:
            print("  - " + p)
        return 1
    print("every check is classified, at its line, with its fingerprint and keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
