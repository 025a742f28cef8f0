"""The two launch dialects: Megatron-LM flags and Megatron Bridge overrides (or config objects).

Parsing turns a launch script, an override list or a ConfigContainer-shaped object into engine fields,
remembering which flag or key set each field and what the engine does not model. Rendering turns
engine fields back into either dialect, either from scratch or as the smallest edit of what the user
wrote. The field <-> flag/key table is data (``dialects/dialects.yaml``); the Megatron-LM flag inventory
(``dialects/megatron_lm_flags.json``) tells flags that take values from switches and unknown flags from
flags the engine simply does not model.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ..errors import InputError

LAUNCHER_FLAGS = {
    "--nnodes",
    "--nproc-per-node",
    "--nproc_per_node",
    "--node-rank",
    "--node_rank",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--rdzv-backend",
    "--rdzv_backend",
    "--rdzv-id",
    "--rdzv_id",
    "--standalone",
    "--max-restarts",
    "--max_restarts",
}
LAUNCHER_SWITCHES = {"--standalone"}


@cache
def dialect_table() -> dict[str, Any]:
    return yaml.safe_load(resources.files(__package__).joinpath("dialects.yaml").read_text())


@cache
def megatron_flags() -> dict[str, dict[str, Any]]:
    text = resources.files(__package__).joinpath("megatron_lm_flags.json").read_text()
    return json.loads(text)["flags"]


# --------------------------------------------------------------------------- Megatron-LM scripts


@dataclass
class ArgItem:
    """One flag as written, with its values (strings) and the position it had."""

    flag: str
    values: list[str]
    inline: bool = False  # written as --flag=value


@dataclass
class ParsedScript:
    items: list[ArgItem] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    launcher: dict[str, str] = field(default_factory=dict)
    launcher_tokens: list[str] = field(default_factory=list)  # everything before the Megatron flags
    unknown: list[str] = field(default_factory=list)  # flags Megatron-LM's parser would refuse
    unresolved: list[str] = field(default_factory=list)  # values with shell variables left


_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _expand(token: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)

    return _VAR.sub(sub, token)


def _tokens(source: str | list[str]) -> list[str]:
    if isinstance(source, list):
        text = " ".join(shlex.quote(s) if " " in s and not s.startswith("--") else s for s in source)
    else:
        text = source
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError as exc:
        raise InputError("megatron_args", text[:60] + "...", f"shell-like text ({exc})") from exc


def parse_megatron_args(source: str | list[str]) -> ParsedScript:
    """Parse Megatron-LM arguments as written in a launch script (continuations, comments, env)."""
    flags = megatron_flags()
    parsed = ParsedScript()
    tokens = [t for t in _tokens(source) if t not in ("(", ")", ";", "&&", "\\")]
    # Variable assignments and launcher words come first; Megatron flags follow a *.py script or begin
    # with the first known Megatron flag.
    i = 0
    megatron_started = False
    while i < len(tokens):
        tok = tokens[i]
        if tok.endswith("=(") or tok in ("export",):
            i += 1
            continue
        m = _ASSIGN.match(tok)
        if m and not tok.startswith("-"):
            parsed.env[m.group(1)] = _expand(m.group(2).strip("()"), parsed.env)
            i += 1
            continue
        tok = _expand(tok, parsed.env)
        if not tok.startswith("--"):
            if not megatron_started:
                parsed.launcher_tokens.append(tok)
            if tok.endswith(".py"):
                megatron_started = True
            i += 1
            continue
        name, eq, inline_value = tok.partition("=")
        if name in LAUNCHER_FLAGS and name not in flags:
            if name in LAUNCHER_SWITCHES:
                parsed.launcher[name.replace("_", "-")] = "true"
                i += 1
            else:
                value = inline_value if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
                parsed.launcher[name.replace("_", "-")] = _expand(value, parsed.env)
                i += 1 if eq else 2
            if not megatron_started:
                if eq or name in LAUNCHER_SWITCHES:
                    parsed.launcher_tokens.append(tok)
                else:
                    parsed.launcher_tokens.extend([tok, _expand(value, parsed.env)])
            continue
        megatron_started = True
        spec = flags.get(name)
        values: list[str] = []
        j = i + 1
        if eq:
            values = [inline_value]
        elif spec is None or spec["kind"] == "value":
            nargs = spec.get("nargs", 1) if spec else "*"
            while j < len(tokens) and not tokens[j].startswith("--"):
                if nargs == 1 and values:
                    break
                values.append(_expand(tokens[j], parsed.env))
                j += 1
        if spec is None:
            parsed.unknown.append(name)
        values = [_expand(v, parsed.env) for v in values]
        parsed.unresolved += [f"{name} {v}" for v in values if "$" in v]
        parsed.items.append(ArgItem(name, values, inline=bool(eq)))
        i = j if not eq else i + 1
    return parsed


# --------------------------------------------------------------------------- Bridge overrides


def _split_overrides(text: str) -> list[str]:
    """Split 'a=1 b=[x, y]' into items, keeping brackets and quotes together."""
    items, buf, depth, quote = [], "", 0, ""
    for ch in text:
        if quote:
            buf += ch
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
            buf += ch
        elif ch in "[{(":
            depth += 1
            buf += ch
        elif ch in "]})":
            depth -= 1
            buf += ch
        elif ch.isspace() and depth <= 0:
            if buf:
                items.append(buf)
            buf = ""
        else:
            buf += ch
    if buf:
        items.append(buf)
    return [i for i in items if i != "\\"]


def parse_value(text: str) -> Any:
    """An override value: YAML scalars and flow lists ([a,b]), None/null, True/False."""
    stripped = text.strip()
    if stripped in ("None", "none", "null", "~"):
        return None
    try:
        value = yaml.safe_load(stripped)
    except yaml.YAMLError:
        return stripped
    return value


def parse_bridge_overrides(source: str | list[str]) -> dict[str, Any]:
    """Parse Megatron Bridge 'key=value' overrides (dotted keys, lists as [a,b]) into {key: value}."""
    if isinstance(source, str):
        lines = [line.split("#", 1)[0] for line in source.replace("\\\n", " ").splitlines()]
        items = _split_overrides(" ".join(lines))
    else:
        items = [s for s in source if s.strip()]
    out: dict[str, Any] = {}
    for item in items:
        item = item.strip().lstrip("+")
        if "=" not in item:
            raise InputError(
                "bridge_overrides", item, "key=value items, e.g. model.tensor_model_parallel_size=2"
            )
        key, _, value = item.partition("=")
        key = key.strip()
        if not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            raise InputError(
                "bridge_overrides", key, "a dotted ConfigContainer key such as model.context_parallel_size"
            )
        out[key] = parse_value(value)
    return out


def flatten_config(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested ConfigContainer-shaped object -> dotted keys (mixed_precision may stay a string)."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten_config(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def load_config_object(source: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return dict(source)
    try:
        data = yaml.safe_load(source)
    except yaml.YAMLError as exc:
        raise InputError(
            "config", str(source)[:60], f"a JSON or YAML object ({exc.__class__.__name__})"
        ) from exc
    if not isinstance(data, Mapping):
        raise InputError("config", str(source)[:60], "a JSON or YAML object with ConfigContainer sections")
    return dict(data)


def unflatten(keys: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in keys.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = value
    return out


# --------------------------------------------------------------------------- rendering


def _fmt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_fmt_value(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(value)
    return str(value)


def megatron_tokens(field_name: str, value: Any) -> list[str]:
    """The Megatron-LM tokens that set one engine field to ``value`` ([] when the default applies)."""
    table = dialect_table()
    spec = table["fields"][field_name]
    special = spec.get("special")
    if special == "precision":
        return list(table["precision"][value]["megatron"])
    if special == "dispatcher":
        if value.startswith("flex-"):
            return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", value[5:]]
        return ["--moe-token-dispatcher-type", value]
    if special == "optimizer_offload":
        return (
            []
            if not value
            else ["--optimizer-cpu-offload", "--optimizer-offload-fraction", _fmt_value(value)]
        )
    if special == "activation_offload":
        return [] if not value else ["--fine-grained-activation-offloading", "--offload-modules", *value]
    if special == "cross_entropy":
        return {"none": [], "native": ["--cross-entropy-loss-fusion"]}.get(
            value, ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]
        )
    flag = spec["megatron"].get("flag")
    if flag is None or special:
        return []
    kind = megatron_flags()[flag]["kind"]
    if kind == "true":
        return [flag] if value else []
    if kind == "false":
        return [] if value else [flag]
    if value is None:
        return []
    if isinstance(value, list):
        return [flag, *(str(v) for v in value)]
    return [flag, _fmt_value(value)]


def bridge_items(field_name: str, value: Any) -> dict[str, Any]:
    """The Bridge override keys that set one engine field to ``value``."""
    table = dialect_table()
    spec = table["fields"][field_name]
    special = spec.get("special")
    if special == "precision":
        return {"mixed_precision": table["precision"][value]["bridge"]}
    if special == "dispatcher":
        if value.startswith("flex-"):
            return {"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": value[5:]}
        return {"model.moe_token_dispatcher_type": value}
    if special == "optimizer_offload":
        if not value:
            return {"optimizer.optimizer_cpu_offload": False}
        return {"optimizer.optimizer_cpu_offload": True, "optimizer.optimizer_offload_fraction": value}
    if special == "activation_offload":
        if not value:
            return {"model.fine_grained_activation_offloading": False}
        return {"model.fine_grained_activation_offloading": True, "model.offload_modules": list(value)}
    if special == "cross_entropy":
        if value == "none":
            return {"model.cross_entropy_loss_fusion": False}
        return {"model.cross_entropy_loss_fusion": True, "model.cross_entropy_fusion_impl": value}
    key = spec["bridge"].get("key")
    if key is None or special:
        return {}
    out = {key: value}
    for extra in spec["bridge"].get("also", []):
        out[extra] = value
    return out


def flags_for(field_name: str) -> list[str]:
    """The Megatron-LM flag names that can set ``field_name`` (deprecated ones included)."""
    spec = dialect_table()["fields"].get(field_name, {})
    m = spec.get("megatron", {})
    names = [m["flag"]] if m.get("flag") else list(m.get("flags", []))
    return names + list(m.get("deprecated", []))


def keys_for(field_name: str) -> list[str]:
    spec = dialect_table()["fields"].get(field_name, {})
    b = spec.get("bridge", {})
    names = [b["key"]] if b.get("key") else list(b.get("keys", []))
    return names + list(b.get("also", [])) + list(b.get("deprecated", []))


def render_megatron(tokens: list[str], per_line: bool = True) -> str:
    """Tokens as a launch-script fragment: one flag (with its values) per line, '\\' continued."""
    lines: list[list[str]] = []
    for tok in tokens:
        if tok.startswith("--") or not lines:
            lines.append([tok])
        else:
            lines[-1].append(tok)
    quoted = [" ".join(shlex.quote(t) for t in line) for line in lines]
    return (" \\\n    " if per_line else " ").join(quoted)


def render_bridge(items: Mapping[str, Any]) -> list[str]:
    return [f"{key}={_fmt_value(value)}" for key, value in items.items()]
