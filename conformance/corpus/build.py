"""Regenerate the corpus where its upstream sources are available, and record upstream's verdict on each entry.

Usage (inside the conformance environment; ``make corpus`` runs it)::

    python -m conformance.corpus.build --megatron build/conformance/mcore --bridge build/conformance/bridge \
        [--megatron-lm-repo PATH] [--modelzoo-repo PATH] [--no-recipes]

A repository argument (a git folder of NVIDIA/Megatron-LM with branch core_r0.19.0, or of
yanring/Megatron-MoE-ModelZoo) re-renders that part; without it the stored entries are kept and judged
again. The Bridge recipes are rebuilt from the wheel unless ``--no-recipes``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import bridge_env, corpus, render_lm, render_modelzoo, stand_ins
from .judge_lm import judge_argv, verdict_record


def _oracle(core: Path, bridge: Path):
    from ..oracle import Oracle

    oracle = Oracle(core, None, None)
    stand_ins.apply()
    bridge_env.prepare(bridge)
    oracle.roots.insert(1, str(bridge.resolve()))  # Bridge frames named relative to the wheel, as Core's are
    return oracle


def judge(oracle, entry, expect=None) -> dict:
    """Upstream's verdict on an entry (a Megatron-LM argv or a Bridge override list)."""
    from .judge_bridge import judge_overrides

    if entry["kind"] == "megatron-lm":
        return verdict_record(judge_argv(oracle, entry["argv"], entry.get("env", {}), entry["num_gpus"], entry["gpu"],
                                         entry.get("script", "pretrain_gpt.py")))  # fmt: skip
    verdict, mismatch = judge_overrides(oracle, entry["classes"], entry["overrides"], entry["num_gpus"],
                                        entry["gpu"], expect)  # fmt: skip
    record = verdict_record(verdict)
    if expect is not None:
        record["dump_mismatch"] = mismatch
    return record


def _judge_all(oracle, entries, expects=None) -> None:
    for entry in entries:
        reason = corpus.why_not_judged(entry)
        entry.pop("verdict", None)
        if reason is None:
            entry["verdict"] = judge(oracle, entry, (expects or {}).get(entry["id"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--megatron", type=Path, required=True)
    p.add_argument("--bridge", type=Path, required=True)
    p.add_argument("--megatron-lm-repo", type=Path, default=os.environ.get("MEGATRON_LM_REPO"))
    p.add_argument("--modelzoo-repo", type=Path, default=os.environ.get("MODELZOO_REPO"))
    p.add_argument(
        "--no-recipes", action="store_true", help="keep the stored Bridge entries (judge them again)"
    )
    args = p.parse_args(argv)
    started = time.monotonic()
    oracle = _oracle(args.megatron, args.bridge)
    for name, repo, render, about in (
        ("megatron-lm", args.megatron_lm_repo, render_lm.render,
         {"what": "Megatron-LM core_r0.19.0 MoE functional tests as _run_training.sh renders them",
          "rendered_by": "conformance/corpus/render_lm.py"}),
        ("modelzoo", args.modelzoo_repo, render_modelzoo.render,
         {"what": "Megatron-MoE-ModelZoo launches as sbatch_benchmarking.sh composes them",
          "rendered_by": "conformance/corpus/render_modelzoo.py"}),
    ):  # fmt: skip
        stored = corpus.load(name)
        if repo is not None and Path(repo).is_dir():
            entries = render(Path(repo))
        else:
            entries, about = stored["entries"], stored["about"] or about
            print(f"corpus: {name}: no repository given, judging the {len(entries)} stored entries again")
        _judge_all(oracle, entries)
        print(f"corpus: {name}: {len(entries)} entries -> {corpus.save(name, about, entries)}")
    stored = corpus.load("bridge")
    about = {"what": "every complete recipe function of the megatron-bridge 0.6.2 wheel (recipes/, perf_recipes/), "
             "MoE ones dumped as override lists", "rendered_by": "conformance/corpus/bridge_recipes.py",
             "models": "conformance/corpus/hf/<id>/config.json (source.json says where each came from)"}  # fmt: skip
    if args.no_recipes:
        entries, expects = stored["entries"], {}
    else:
        from .bridge_recipes import build, flatten, omega, recipe_functions

        entries, expects = [], {}
        for name, fn in recipe_functions().items():
            entry = build(name, fn)
            cfg = entry.pop("_cfg", None)
            if cfg is not None:
                expects[entry["id"]] = flatten(omega(cfg))
            entries.append(entry)
    _judge_all(oracle, entries, expects)
    print(f"corpus: bridge: {len(entries)} recipe functions -> {corpus.save('bridge', about, entries)}")
    print(f"corpus: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
