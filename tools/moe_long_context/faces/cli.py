"""Command-line face: ``moe-lc <command>``, one sub-command per registered tool plus catalog listings.

Flags are generated from the tools' request models (``--dashed-names``, booleans as ``--x/--no-x``,
lists comma-separated). ``--json`` prints the result exactly as the MCP tool returns it. Exit codes:
0 the tool answered and found no error, 1 the configuration has error findings, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from .. import __version__
from ..engine.rules import rule_table
from ..errors import InputError, describe_validation_error, too_deep
from ..model.catalog import gpus, load_model, models
from .registry import TOOLS, TOOLS_BY_COMMAND, Tool
from .render import render_result, render_table


def _is_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    args = typing.get_args(annotation)
    return (
        isinstance(annotation, types.UnionType | typing._UnionGenericAlias)
        and bool in args
        and len(args) <= 2
    )


def _add_tool_arguments(parser: argparse.ArgumentParser, request: type[BaseModel]) -> None:
    for name, field in request.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = (field.description or "").replace("%", "%%")  # argparse formats help with %
        if field.is_required():
            help_text += " (required)"
        if _is_bool(field.annotation):
            parser.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar="VALUE", help=help_text)
    parser.add_argument(
        "--json", action="store_true", help="Print the result as JSON (the MCP result object)."
    )


TEXT_INPUTS = ("megatron_args", "bridge_overrides", "config")  # may be given as FILE, or - for stdin


PATH_MAX = 4096  # longest path the CLI will try to open; longer text is never looked up on disk


def looks_like_path(value: str) -> bool:
    """Whether a launch argument is a file to read rather than the launch itself, decided from its shape
    alone (no file-system call): one word, no '=', not a flag, not a JSON/YAML object, short enough."""
    return (
        0 < len(value) <= PATH_MAX
        and not any(c.isspace() for c in value)
        and "=" not in value
        and not value.startswith(("-", "{", "["))
    )


def _read_text_input(name: str, value: str) -> str:
    from pathlib import Path

    if value == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream (tests, embedding): already decoded
            return sys.stdin.read()
        data = stream.read()
        where = "stdin"
    elif looks_like_path(value):
        try:
            data = Path(value).read_bytes()
        except FileNotFoundError:
            if name == "bridge_overrides" and "." in value and "/" not in value:  # a key without its value
                raise InputError.plain(f"--bridge-overrides {value}: an override is key=value ({value}=VALUE), "
                                       "or give a file that exists") from None  # fmt: skip
            raise InputError.plain(f"--{name.replace('_', '-')} {value}: no such file (give a path that exists, "
                                   "- for stdin, or the launch text itself)") from None  # fmt: skip
        except OSError as exc:
            raise InputError.plain(
                f"--{name.replace('_', '-')} {value}: cannot read it ({exc.strerror})"
            ) from None
        except ValueError:  # a NUL byte, or a character no file name can hold (a lone surrogate)
            raise InputError.plain(
                f"--{name.replace('_', '-')} {value!r}: not a file name this system can open (give a path, - for "
                "stdin, or the launch text itself)"
            ) from None
        where = value
    else:
        return value
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError.plain(
            f"--{name.replace('_', '-')} {where}: not UTF-8 text (byte {exc.start}); save the launch as UTF-8"
        ) from None


def _arguments(ns: argparse.Namespace, request: type[BaseModel]) -> dict[str, Any]:
    """Namespace -> request arguments; a --model that looks like JSON is parsed as a config object, and a
    launch (--megatron-args, --bridge-overrides, --config) may be a FILE or - for stdin."""
    data = {k: v for k, v in vars(ns).items() if k in request.model_fields}
    for name in TEXT_INPUTS:
        if isinstance(data.get(name), str):
            data[name] = _read_text_input(name, data[name])
    model = data.get("model")
    if isinstance(model, str) and model.lstrip().startswith("{"):
        try:
            data["model"] = json.loads(model)
        except RecursionError:
            raise too_deep("model") from None
        except json.JSONDecodeError as exc:
            raise InputError("model", model[:40] + "...", f"valid JSON ({exc.msg})") from None
    return data


def _run_tool(tool: Tool, ns: argparse.Namespace) -> int:
    args = _arguments(ns, tool.request)
    try:
        request = tool.request.model_validate(args)
    except ValidationError as exc:
        raise InputError.plain(describe_validation_error(exc, tool.request.model_fields)) from None
    result = tool.fn(request)
    if getattr(ns, "report", None):
        from pathlib import Path

        from .report import render_plan_report

        try:
            Path(ns.report).write_text(render_plan_report(request, result))
        except OSError as exc:
            raise InputError.plain(f"--report {ns.report}: cannot write it ({exc.strerror})") from None
        print(f"wrote {ns.report}", file=sys.stderr)
    if ns.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        print(render_result(tool.title, result))
    return 1 if getattr(result, "valid", True) is False else 0


def _parameter_counts(spec, p) -> dict[str, int]:
    """The computed counts of one model (model/params.py): what ``models ID`` and ``models FILE`` print."""
    counts = {"total": p.total, "active": p.active, "embedding": p.embedding, "routed experts": p.experts,
              "mtp (not in total)": p.mtp}  # fmt: skip
    if p.megatron_only:  # Megatron allocates more than the checkpoint holds (k = v, a widened gate)
        counts = {"total (checkpoint)": p.checkpoint_total, "active (checkpoint)": p.checkpoint_active,
                  "megatron-only (in total)": p.megatron_only, **counts}  # fmt: skip
    return counts


def _models(ns: argparse.Namespace) -> int:
    from ..model.params import model_params

    if ns.id:
        spec = load_model(ns.id)
        counts = _parameter_counts(spec, model_params(spec))
        if ns.json:
            print(json.dumps({**spec.model_dump(mode="json"), "parameters": counts}, indent=2))
        else:
            print(render_result(spec.name, spec))
            print(render_table([{k: f"{v / 1e9:.2f}B" for k, v in counts.items()}]))
        return 0

    rows = []
    for spec in models():
        p = model_params(spec)
        rows.append(
            {
                "id": spec.id,
                "layers": spec.num_layers,
                "hidden": spec.hidden_size,
                "attention": spec.attention,
                "heads/kv": f"{spec.num_attention_heads}/{spec.num_query_groups}",
                "experts/topk": f"{spec.num_experts}/{spec.moe_router_topk}",
                "total": f"{p.total / 1e9:.1f}B",
                "active": f"{p.active / 1e9:.1f}B",
                "aliases": ", ".join(spec.aliases[:2]),
            }
        )
    if ns.json:
        print(json.dumps([s.model_dump(mode="json") for s in models()], indent=2))
    else:
        print(render_table(rows))
    return 0


def _gpus(ns: argparse.Namespace) -> int:
    if ns.json:
        print(json.dumps([g.model_dump(mode="json") for g in gpus()], indent=2))
        return 0
    rows = [
        {
            "id": g.id,
            "name": g.name,
            "HBM GiB": g.usable_hbm_gib,
            "BF16 TF": g.bf16_tflops,
            "FP8 TF": g.fp8_tflops,
            "FP4 TF": g.fp4_tflops or "-",
            "NVLink": g.nvlink_domain,
            "per node": g.gpus_per_node,
            "recipes": ",".join(g.quant_recipes),
            "flex": ",".join(g.flex_backends),
        }
        for g in gpus()
    ]
    print(render_table(rows))
    return 0


def _rules(ns: argparse.Namespace) -> int:
    if ns.upstream:
        return _upstream(ns)
    table = rule_table().values()
    if ns.json:
        print(json.dumps([vars(r) | {"severity": r.severity.value} for r in table], indent=2))
        return 0
    rows = [
        {"code": r.code, "family": r.family, "severity": r.severity.value, "rule": r.title} for r in table
    ]
    print(render_table(rows))
    return 0


def _upstream(ns: argparse.Namespace) -> int:
    """The upstream inventory: every config-time check of the pinned sources, and whether a rule models it."""
    from ..engine.rules.upstream import checked, inventory_rows

    rows = inventory_rows(ns.status)
    if ns.json:
        print(json.dumps(rows, indent=1))
        return 0
    c = checked()
    print(f"{c.upstream} of the {c.applicable} upstream checks that apply are modelled by rules; "
          f"{len(inventory_rows()) - c.applicable} do not apply (the reason is given).")  # fmt: skip
    for r in rows:
        why = (
            ", ".join(r["rule"] or [])
            or r["reason"]
            or "no rule yet: a configuration reaching it gets it as not_checked"
        )
        print(f"{r['file']}:{r['line']}  [{r['status']}] {why}")
        print(f"    {r['message']}")
    return 0


def _docs(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from .docs import PAGES

    folder = ns.write or ns.check
    if folder is None:
        raise InputError("docs", None, "--write DIR or --check DIR")
    stale = []
    for name, render in PAGES.items():
        path = Path(folder) / name
        text = render() + "\n"
        if ns.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path))
    skill = Path(folder).resolve().parent / "SKILL.md"
    if skill.exists():  # the skill's generated model block, next to its references/
        from .families_doc import with_skill_block

        text = skill.read_text()
        if ns.write and with_skill_block(text) != text:
            skill.write_text(with_skill_block(text))
            print(f"wrote {skill}")
        elif not ns.write and with_skill_block(text) != text:
            stale.append(str(skill))
    if stale:
        print("stale: " + ", ".join(stale) + " (run moe-lc docs --write " + folder + ")", file=sys.stderr)
        return 1
    return 0


def _add_serve_command(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="Run the MCP server (stdio, or streamable HTTP with --http).",
        description="Serve every tool, the catalogs, the rule table and the skill text over MCP: on stdio by "
        "default, or as streamable HTTP at http://HOST:PORT/mcp with --http (DNS-rebinding protection on).",
    )
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="Serve streamable HTTP instead of stdio, e.g. 127.0.0.1:8765 (a bare PORT binds 127.0.0.1).",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="Another Host header name to accept over HTTP (repeatable); loopback names are accepted "
        "when bound to loopback.",
    )
    p.set_defaults(handler=_serve)


def _serve(ns: argparse.Namespace) -> int:
    from .server import serve  # imports the MCP SDK only when serving

    serve(ns.http, ns.allowed_host)
    return 0


class _OneLineParser(argparse.ArgumentParser):
    """Bad flags get one line naming the command and pointing at its --help, not the whole usage block."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: {message} (`{self.prog} --help` lists the flags)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="moe-lc",
        description="Plan and check long-context MoE training on Megatron Bridge / Megatron Core "
        "(Bridge 0.6, Megatron Core 0.19, Transformer Engine 2.14).",
        epilog="Exit codes: 0 ok, 1 the configuration has error findings, 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"moe-lc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for tool in TOOLS:
        p = sub.add_parser(tool.command, help=tool.title.replace("%", "%%"), description=tool.description)
        _add_tool_arguments(p, tool.request)
        if tool.name == "plan_layout":
            p.add_argument(
                "--report", metavar="FILE", help="Also write a self-contained HTML report to FILE."
            )
    p = sub.add_parser(
        "models",
        help="List catalog models, or show one with its parameter counts (moe-lc models deepseek-v3, or a "
        "config.json or YAML spec path).",
    )
    p.add_argument("id", nargs="?", help="A catalog id or alias, or a config.json path.")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("gpus", help="List catalog GPUs.")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("rules", help="List every rule the engine checks, with its source.")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--upstream", action="store_true", help="List every upstream config-time check and its status."
    )
    p.add_argument(
        "--status",
        choices=("modelled", "not_modelled", "not_applicable"),
        help="With --upstream: one status.",
    )
    p = sub.add_parser(
        "docs", help="Write (or check) the generated references/rules.md and references/tools.md."
    )
    p.add_argument("--write", metavar="DIR", help="Directory to write the pages into (e.g. references/).")
    p.add_argument(
        "--check", metavar="DIR", help="Exit 1 when the pages in DIR differ from the generated ones."
    )
    _add_serve_command(sub)
    for extend in EXTENSIONS:
        extend(sub)
    return parser


# Faces above this one that add sub-commands of their own (the evals) register here; see ``moe_long_context.cli``.
EXTENSIONS: list = []


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # echoed input may hold what the terminal cannot encode
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command is None:
        parser.print_help()
        return 2
    try:
        if ns.command in TOOLS_BY_COMMAND:
            return _run_tool(TOOLS_BY_COMMAND[ns.command], ns)
        if ns.command == "models":
            return _models(ns)
        if ns.command == "gpus":
            return _gpus(ns)
        if ns.command == "rules":
            return _rules(ns)
        if ns.command == "docs":
            return _docs(ns)
        return ns.handler(ns)
    except InputError as exc:
        print(f"moe-lc {ns.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
