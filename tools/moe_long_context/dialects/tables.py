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

from ..errors import InputError, check_nesting, too_deep
from ..model.yaml_data import load_data_yaml
from .bridge_keys import bridge_sections, bridge_value_problem
from .hydra import HydraValueError, hydra_value, parse_value
from .shell import ShellSyntaxError, Word, split_words
from .shell import quote as shell_quote

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
    return load_data_yaml(resources.files(__package__).joinpath("dialects.yaml").read_text())


@cache
def megatron_flags() -> dict[str, dict[str, Any]]:
    text = resources.files(__package__).joinpath("megatron_lm_flags.json").read_text()
    return json.loads(text)["flags"]


# --------------------------------------------------------------------------- Megatron-LM scripts


@dataclass
class ArgItem:
    """One flag as written, with its values (strings) and where it was written."""

    flag: str
    values: list[str]
    inline: bool = False  # written as --flag=value
    span: tuple[int, int] | None = None  # characters of the flag and its values in the source text


@dataclass
class ParsedScript:
    items: list[ArgItem] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    launcher: dict[str, str] = field(default_factory=dict)
    launcher_tokens: list[str] = field(default_factory=list)  # everything before the Megatron flags
    unknown: list[str] = field(default_factory=list)  # flags Megatron-LM's parser would refuse
    unresolved: list[str] = field(default_factory=list)  # values with shell variables left
    source: str = ""  # the text the spans refer to
    insert_at: int | None = None  # where a flag the launch does not write yet goes (after the last one)
    command_start: int | None = None  # start of the line the Megatron command begins on
    missing_value: list[str] = field(default_factory=list)  # flags written without the value they need
    stray: list[str] = field(default_factory=list)  # words argparse would refuse as unrecognized arguments
    exports: dict[str, tuple[int, int]] = field(default_factory=dict)  # NAME -> span of its assignment
    bash_breaks: dict[str, str] = field(
        default_factory=dict
    )  # flag -> its value bash splits (unquoted | ( ))


_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ARRAY = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}$")
_NUMBER = re.compile(r"^-\d|^-\.\d")
_BARE_VAR = re.compile(r"^\$(?:[@*]|\{[A-Za-z_]\w*\[[@*]\]\}|\{?[@*]\}?)$")


def _expand(token: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)

    return _VAR.sub(sub, token)


def _source_text(source: str | list[str]) -> str:
    """The launch as one bash text. A list is argv: each element one word (a '--flag value' element is split)."""
    if isinstance(source, str):
        return source
    parts = []
    for s in source:
        if s.startswith("--") and any(c.isspace() for c in s):
            parts.append(s)
        else:
            parts.append(shell_quote(s))
    return " ".join(parts)


def _is_flag(word: str) -> bool:
    return word.startswith("--") and len(word) > 2


def _is_option_like(word: str) -> bool:
    """argparse reads a word that starts with '-' (and is not a negative number) as an option."""
    return word.startswith("-") and len(word) > 1 and not _NUMBER.match(word)


def parse_megatron_args(source: str | list[str]) -> ParsedScript:
    """Parse Megatron-LM arguments as written in a launch script (continuations, comments, env, arrays)."""
    flags = megatron_flags()
    text = _source_text(source)
    parsed = ParsedScript(source=text)
    try:
        words = split_words(text)
    except ShellSyntaxError as exc:
        raise InputError("megatron_args", text[:60] + ("..." if len(text) > 60 else ""),
                         f"bash text ({exc})") from None  # fmt: skip
    arrays: dict[str, list[Word]] = {}
    commands: list[list[Word]] = [[]]
    for w in words:
        if w.kind == "sep":
            commands.append([])
        elif w.kind != "redirect":
            commands[-1].append(w)
    state = {"started": False, "done": False}
    for cmd in commands:
        if state["done"] and not (cmd and _is_flag(cmd[0].value)):
            continue
        _parse_command(cmd, parsed, arrays, flags, state)
    return parsed


def _assignments(cmd: list[Word], parsed: ParsedScript, arrays: dict[str, list[Word]]) -> int:
    """Read leading VAR=value / export VAR=value / VAR=( ... ) words; return the index of the first other word."""
    i = 0
    while i < len(cmd):
        w = cmd[i]
        if w.kind == "word" and w.value in ("export", "declare", "local", "readonly") and i + 1 < len(cmd):
            i += 1
            continue
        m = _ASSIGN.match(w.value) if w.kind == "word" and not w.value.startswith("-") else None
        if not m:
            return i
        name, value = m.group(1), m.group(2)
        if value == "" and i + 1 < len(cmd) and cmd[i + 1].kind == "open":
            j = i + 2
            elems = []
            while j < len(cmd) and cmd[j].kind != "close":
                elems.append(cmd[j])
                j += 1
            arrays[name] = elems
            parsed.exports[name] = (w.start, cmd[j].end if j < len(cmd) else cmd[-1].end)
            i = j + 1
            continue
        parsed.env[name] = _expand(value, parsed.env)
        parsed.exports[name] = (w.start, w.end)
        i += 1
    return i


def _expanded(cmd: list[Word], parsed: ParsedScript, arrays: dict[str, list[Word]]) -> list[Word]:
    """Words after variable expansion: arrays spread (keeping their spans), unquoted variables word-split."""
    out: list[Word] = []
    for w in cmd:
        if w.kind != "word":
            continue
        m = _ARRAY.match(w.value)
        if m and m.group(1) in arrays:
            out.extend(_expanded(arrays[m.group(1)], parsed, arrays))
            continue
        value = _expand(w.value, parsed.env)
        if value != w.value and not w.quoted and any(c.isspace() for c in value):
            out.extend(Word(v, w.start, w.end, "split") for v in value.split())
        elif value != w.value:
            out.append(Word(value, w.start, w.end, "expanded", w.quoted))
        else:
            out.append(w)
    return out


def _parse_command(cmd: list[Word], parsed: ParsedScript, arrays: dict[str, list[Word]],
                   flags: dict[str, dict[str, Any]], state: dict[str, bool]) -> None:  # fmt: skip
    first = _assignments(cmd, parsed, arrays)
    words = _expanded(cmd[first:], parsed, arrays)
    if not words:
        return
    if not state["started"]:  # a new command: what came before was not the Megatron launch
        parsed.command_start = parsed.source.rfind("\n", 0, cmd[first].start) + 1
        parsed.launcher_tokens = []
    i = 0
    in_megatron = state["started"]
    while i < len(words):
        w = words[i]
        tok = w.value
        if not _is_flag(tok):
            if not in_megatron:
                parsed.launcher_tokens.append(tok)
                if tok.endswith(".py"):
                    in_megatron = state["started"] = True
            elif "$" in tok:  # "$@" or a variable the script does not define: its words are unknown here
                parsed.unresolved.append(tok)
            else:
                parsed.stray.append(tok)
            i += 1
            continue
        name, eq, inline_value = tok.partition("=")
        if not in_megatron and name in LAUNCHER_FLAGS and name not in flags:
            key = name.replace("_", "-")
            if name in LAUNCHER_SWITCHES:
                parsed.launcher[key] = "true"
                parsed.launcher_tokens.append(tok)
                i += 1
            elif eq:
                parsed.launcher[key] = inline_value
                parsed.launcher_tokens.append(tok)
                i += 1
            else:
                value = words[i + 1].value if i + 1 < len(words) else ""
                parsed.launcher[key] = value
                parsed.launcher_tokens.extend([tok, value])
                i += 2
            continue
        in_megatron = state["started"] = True
        spec = flags.get(name)
        values: list[str] = []
        j = i + 1
        if eq:
            values = [inline_value]
            if w.breaks and w.kind == "word":
                parsed.bash_breaks[name] = inline_value
        elif spec is None or spec["kind"] == "value":
            nargs = spec.get("nargs", 1) if spec else "*"
            while j < len(words) and not _is_option_like(words[j].value):
                if nargs == 1 and values:
                    break
                if values and _BARE_VAR.match(words[j].value):
                    break  # "$@" or an unknown array after a list value: more arguments, not this flag's
                values.append(words[j].value)
                if words[j].breaks and words[j].kind == "word":
                    parsed.bash_breaks[name] = words[j].value
                j += 1
        if spec is None:
            parsed.unknown.append(name)
        elif spec["kind"] == "value" and not values and spec.get("nargs", 1) in (1, "+"):
            parsed.missing_value.append(name)
        last = words[j - 1] if j > i else w
        local = w.kind != "split" and last.kind != "split"  # written here, not inside a variable's value
        span = (w.start, last.end) if local else None
        parsed.unresolved += [f"{name} {v}" for v in values if "$" in v]
        parsed.items.append(ArgItem(name, values, inline=bool(eq), span=span))
        if local:
            parsed.insert_at = max(parsed.insert_at or 0, last.end)
        i = j
    if in_megatron:
        state["done"] = True


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


def _override_items(source: str | list[str]) -> list[str]:
    if isinstance(source, str):
        lines = [line.split("#", 1)[0] for line in source.replace("\\\n", " ").splitlines()]
        return _split_overrides(" ".join(lines))
    return [s for s in source if s.strip()]


def bridge_override_prefixes(source: str | list[str]) -> dict[str, str]:
    """{key: its Hydra prefix ('', '+' or '++')}: whether an override may add a key struct mode lacks."""
    out = {}
    for item in _override_items(source):
        key = item.strip().partition("=")[0].strip()
        out[key.lstrip("+")] = key[: len(key) - len(key.lstrip("+"))]
    return out


def parse_bridge_overrides(source: str | list[str]) -> dict[str, Any]:
    """Parse Megatron Bridge 'key=value' overrides (dotted keys, lists as [a,b]) into {key: value}."""
    out: dict[str, Any] = {}
    for item in _override_items(source):
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
        try:
            out[key] = parse_value(value)
        except HydraValueError as exc:
            shown = value if len(value) <= 80 else value[:60] + "..."
            raise InputError.plain(f"bridge_overrides: {key}={shown}: {exc}") from None
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
        check_nesting(source, "config")
        return _sections_are_objects(dict(source))
    try:
        data = yaml.safe_load(source)
    except RecursionError:
        raise too_deep("config") from None
    except yaml.YAMLError as exc:
        raise InputError(
            "config", str(source)[:60], f"a JSON or YAML object ({exc.__class__.__name__})"
        ) from exc
    if not isinstance(data, Mapping):
        raise InputError("config", str(source)[:60], "a JSON or YAML object with ConfigContainer sections")
    check_nesting(data, "config")
    return _sections_are_objects(dict(data))


# ConfigContainer entries a recipe may give as a name rather than an object (mixed_precision="bf16_mixed").
_NAMED_SECTIONS = ("mixed_precision", "peft", "comm_overlap", "env_vars")


def _sections_are_objects(data: dict[str, Any]) -> dict[str, Any]:
    """A ConfigContainer section (model, train, optimizer, ...) is an object: Bridge cannot build one from 5."""
    for name, value in data.items():
        if (
            name in bridge_sections()
            and name not in _NAMED_SECTIONS
            and not isinstance(value, Mapping | None)
        ):
            raise InputError(f"config.{name}", value, f"an object of {name} fields (e.g. {{tensor_model_parallel_size: 2}})"
                             if name == "model" else f"an object of {name} fields")  # fmt: skip
    return data


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
        return {"none": [], "native": ["--cross-entropy-loss-fusion"],
                "te": ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]}[value]  # fmt: skip
    if special == "grad_reduce":
        return [] if value else ["--grad-reduce-in-bf16"]
    flag = spec["megatron"].get("flag")
    if flag is None or special:
        return []
    kind = megatron_flags()[flag]["kind"]
    if value is None:  # unset (a front end's own default): nothing to write
        return []
    if kind == "true":
        return [flag] if value else []
    if kind == "false":
        return [] if value else [flag]
    if isinstance(value, list):  # an empty list is the flag left out (argparse refuses it without values)
        return [flag, *(str(v) for v in value)] if value else []
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
    if special == "grad_reduce":
        return {"ddp.grad_reduce_in_fp32": value}
    # LoRA is written as its own fields (++peft.dim, ++peft.target_modules), for a PEFT recipe's object
    if special == "peft":
        return {"peft": None} if value == "none" else {}
    key = spec["bridge"].get("key")
    if key is None or special:
        return {}
    out = {key: value}
    for extra in spec["bridge"].get("also", []):
        out[extra] = value
    if value is None:  # a field Bridge cannot set to null (seq_length) is left to the recipe instead
        out = {k: v for k, v in out.items() if bridge_value_problem(k, None) is None}
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
    """Override items as Hydra reads them. Bridge applies them in Hydra's struct mode, which refuses a key the
    container does not have yet unless it is added: a key of a free section (env_vars) or below a field (a dict
    such as dataset.dataset_kwargs.x) is written ``++key=value``, Hydra's add-or-override. So is every peft key:
    Bridge leaves a recipe's PEFT object (callable) out of its OmegaConf view and a full-training recipe's peft
    is null, so no peft sub-key exists for a plain override (run on Bridge 0.6.2 with hydra-core 1.3.8)."""
    return [f"{'++' if _added(key) else ''}{key}={hydra_value(value)}" for key, value in items.items()]


def _added(key: str) -> bool:
    from .bridge_keys import free_sections

    head = key.split(".", 1)[0]
    return key.count(".") >= 2 or head in free_sections() or (head == "peft" and "." in key)
