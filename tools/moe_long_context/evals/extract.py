"""Reading an answer: prose and code blocks, stated numbers, parallel layouts, pipeline splits, lint claims.

Everything here is a pure function of the answer text. The readers are deliberately literal: a number counts
only when the label it answers is next to it (``CP = 32``, ``32 tokens per rank``, ``52.9 GiB``), a layout
only when at least three of TP, CP, PP and EP are stated together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Segment:
    """A prose paragraph (wrapped lines joined; each bullet, heading or table row its own), or a fenced code
    block."""

    text: str
    code: bool

    def lines(self) -> list[str]:
        """The units a label and its number must share: a code block's lines, a paragraph whole."""
        return self.text.splitlines() if self.code else [self.text]


BLOCK_START = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|#|\|)")


def segments(answer: str) -> list[Segment]:
    out: list[Segment] = []
    block: list[str] | None = None
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(Segment(" ".join(part.strip() for part in paragraph), False))
            paragraph.clear()

    for line in answer.splitlines():
        if FENCE.match(line):
            if block is None:
                flush()
                block = []
            else:
                out.append(Segment("\n".join(block), True))
                block = None
            continue
        if block is not None:
            block.append(line)
        elif not line.strip():
            flush()
        else:
            if BLOCK_START.match(line):
                flush()
            paragraph.append(line)
    flush()
    if block:  # an unclosed fence still holds code
        out.append(Segment("\n".join(block), True))
    return out


def prose(answer: str) -> str:
    return "\n".join(s.text for s in segments(answer) if not s.code)


SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=[A-Z`*(\-\[])|\s+[-–—]\s+")


def sentences(answer: str) -> list[str]:
    """Sentences of the prose (code blocks left out); a bullet or table row is at least one sentence."""
    out = []
    for seg in segments(answer):
        if not seg.code:
            out += [s for s in SENTENCE_END.split(seg.text) if s.strip()]
    return out


def snippet(text: str, start: int, end: int, pad: int = 40) -> str:
    left, right = max(0, start - pad), min(len(text), end + pad)
    out = text[left:right].replace("\n", " ").strip()
    return ("..." if left else "") + out + ("..." if right < len(text) else "")


# --------------------------------------------------------------------------- numbers

NUMBER = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\d)")
CONTEXT_BEFORE = 64  # characters before a number where its label may stand
CONTEXT_AFTER = 24  # characters after it (units: GiB, tokens per rank)


def numbers(line: str) -> list[tuple[float, int, int]]:
    """(value, start, end) of every number written in the line (1,024 and 52.9 included)."""
    out = []
    for m in NUMBER.finditer(line):
        whole = m.group(1).replace(",", "")
        out.append((float(whole + (m.group(2) or "")), m.start(), m.end()))
    return out


def _labelled(line: str, start: int, end: int, context: re.Pattern) -> bool:
    """The label stands right before the number (nothing numeric in between) or right after it. The label is
    matched in the whole line, so a word cut by the window (GB of GB200) is not a label."""
    for hit in context.finditer(line):
        if start - CONTEXT_BEFORE <= hit.end() <= start and not re.search(r"\d", line[hit.end() : start]):
            return True
        if end <= hit.start() <= end + CONTEXT_AFTER and not re.search(r"\d", line[end : hit.start()]):
            return True
    return False


def find_number(
    answer: str, value: float, abs_tol: float, rel_tol: float, context: str | None
) -> tuple[str | None, list[str]]:
    """The first place the answer states ``value`` (within tolerance) next to its label, and the labelled
    values it states instead (for the evidence when it does not)."""
    label = re.compile(context, re.I) if context else None
    tol = max(abs_tol, rel_tol * abs(value))
    others: list[str] = []
    for line in (unit for seg in segments(answer) for unit in seg.lines()):
        for n, start, end in numbers(line):
            if label is not None and not _labelled(line, start, end, label):
                continue
            if abs(n - value) <= tol + 1e-9:
                return snippet(line, start, end), others
            others.append(snippet(line, start, end, 24))
    return None, others


# --------------------------------------------------------------------------- layouts

_DIMS: dict[str, str] = {
    "etp": r"ETP|(?i:expert[-_ ]tensor[-_ ]parallel(?:[-_ ]size)?)",
    "edp": r"EDP|(?i:expert[-_ ]data[-_ ]parallel(?:[-_ ]size)?)",
    "vpp": r"VPP|(?i:virtual[-_ ]pipeline[-_ ]model[-_ ]parallel[-_ ]size|num[-_ ]virtual[-_ ]stages[-_ ]per"
    r"[-_ ]pipeline[-_ ]rank|virtual[-_ ]pipeline(?:[-_ ]stages)?)",
    "tp": r"TP|(?i:tensor[-_ ]model[-_ ]parallel[-_ ]size|tensor[-_ ]parallel(?:ism)?(?:[-_ ]size)?)",
    "cp": r"CP|(?i:context[-_ ]parallel(?:ism)?(?:[-_ ]size)?)",
    "pp": r"PP|(?i:pipeline[-_ ]model[-_ ]parallel[-_ ]size|pipeline[-_ ]parallel(?:ism)?(?:[-_ ]size)?)",
    "ep": r"EP|(?i:expert[-_ ]model[-_ ]parallel[-_ ]size|expert[-_ ]parallel(?:ism)?(?:[-_ ]size)?)",
    "dp": r"DP|(?i:data[-_ ]parallel(?:ism)?(?:[-_ ]size)?)",
}
DIM_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_\-.])(?:--|model\.)?(?:"
    + "|".join(f"(?P<{name}>{pattern})" for name, pattern in _DIMS.items())
    + r")(?:\s*(?:=|:|is|of)\s*|\s?)(?P<value>\d+)(?![\d.])"
)
PRODUCT_BEFORE = re.compile(r"(?:^|\s)[x×*·]\s*$")
PRODUCT_AFTER = re.compile(r"^\s*[x×*·]\s")
CORE_DIMS = ("tp", "cp", "pp", "ep")


@dataclass
class LayoutMention:
    dims: dict[str, int] = field(default_factory=dict)
    text: str = ""  # the sizes as written
    segment: str = ""  # the line (or code block) they stand in

    def describe(self) -> str:
        order = ("tp", "cp", "pp", "vpp", "ep", "etp", "dp", "edp")
        return " ".join(f"{d.upper()}{self.dims[d]}" for d in order if d in self.dims)


def dim_tokens(text: str) -> list[tuple[str, int, int, int]]:
    """(dimension, value, start, end) for each parallel size written in the text, products left out."""
    out = []
    for m in DIM_TOKEN.finditer(text):
        if PRODUCT_BEFORE.search(text[: m.start()]) or PRODUCT_AFTER.match(text[m.end() :]):
            continue
        name = next(k for k in _DIMS if m.group(k))
        out.append((name, int(m.group("value")), m.start(), m.end()))
    return out


def layout_mentions(answer: str) -> list[LayoutMention]:
    """Layouts stated in the answer: runs of parallel sizes in one line (or one code block) naming at least
    three of TP, CP, PP and EP; a size named twice starts the next layout."""
    out: list[LayoutMention] = []
    for seg in segments(answer):
        current = LayoutMention()
        first = 0
        runs: list[tuple[LayoutMention, int, int]] = []
        last_end = 0
        for name, value, start, end in dim_tokens(seg.text):
            if name in current.dims:
                runs.append((current, first, last_end))
                current = LayoutMention()
            if not current.dims:
                first = start
            current.dims[name] = value
            last_end = end
        runs.append((current, first, last_end))
        for mention, start, end in runs:
            if sum(d in mention.dims for d in CORE_DIMS) >= 3:
                mention.text = seg.text[start:end].replace("\n", " ")[:160]
                mention.segment = seg.text
                out.append(mention)
    return out


PIPELINE_LAYOUT = re.compile(r"(?<![A-Za-z0-9])E[tm|()*\d]*t[tm|()*\d]*L(?![A-Za-z0-9])")
ACCOUNT_EMBEDDING = re.compile(r"account[-_ ]for[-_ ]embedding", re.I)
ACCOUNT_LOSS = re.compile(r"account[-_ ]for[-_ ]loss", re.I)
FIRST_STAGE = re.compile(
    r"(?:num[-_]layers[-_]in[-_]first[-_]pipeline[-_]stage|decoder[-_]first[-_]pipeline[-_]num[-_]layers)"
    r"\W{0,4}(\d+)",
    re.I,
)
LAST_STAGE = re.compile(
    r"(?:num[-_]layers[-_]in[-_]last[-_]pipeline[-_]stage|decoder[-_]last[-_]pipeline[-_]num[-_]layers)"
    r"\W{0,4}(\d+)",
    re.I,
)
GBS = re.compile(r"(?:\bGBS|global[-_ ]batch[-_ ]size)\W{0,4}(\d+)", re.I)
MBS = re.compile(r"(?:\bMBS|micro[-_ ]batch[-_ ]size)\W{0,4}(\d+)", re.I)


def pipeline_splits(answer: str) -> list[dict[str, Any]]:
    """The pipeline splits the answer states, as engine settings: none, each layout string, the
    account-for flags, the uneven first/last stage sizes."""
    out: list[dict[str, Any]] = [{}]
    for text in dict.fromkeys(PIPELINE_LAYOUT.findall(answer)):
        out.append({"pipeline_layout": text})
    emb, loss = bool(ACCOUNT_EMBEDDING.search(answer)), bool(ACCOUNT_LOSS.search(answer))
    if emb or loss:
        out.append(
            {"account_for_embedding_in_pipeline_split": emb, "account_for_loss_in_pipeline_split": loss}
        )
    first, last = FIRST_STAGE.search(answer), LAST_STAGE.search(answer)
    if first or last:
        uneven = {}
        if first:
            uneven["num_layers_in_first_pipeline_stage"] = int(first.group(1))
        if last:
            uneven["num_layers_in_last_pipeline_stage"] = int(last.group(1))
        out.append(uneven)
    return out


def batch_sizes(answer: str) -> dict[str, int]:
    out = {}
    if m := GBS.search(answer):
        out["gbs"] = int(m.group(1))
    if m := MBS.search(answer):
        out["mbs"] = int(m.group(1))
    return out


# --------------------------------------------------------------------------- lint claims

# Words that assert something is wrong (an error claim) and words that say it is not.
ERROR_CLAIM = re.compile(
    r"\b(?:is|are)\s+(?:not\s+(?:a\s+)?(?:valid|known|recogni[sz]ed|supported|accepted|allowed|legal)|invalid|"
    r"unknown|wrong|incorrect|illegal|unsupported|rejected|refused|an?\s+error|deprecated\s+and\s+removed|"
    r"not\s+a\s+(?:real|megatron|valid)\b)"
    r"|\b(?:not\s+a\s+valid|invalid|unknown|unrecogni[sz]ed|nonexistent|non-existent)\s+"
    r"(?:flag|option|argument|key|value|setting|label|module|name)"
    r"|\bdoes(?:n't|\s+not)\s+exist|\bno\s+longer\s+exists?|\bwas\s+removed"
    r"|\b(?:errors?|fail(?:s|ed|ing)?|crash\w*|asserts?|assertion|refus\w*|reject\w*|violat\w*)\b",
    re.I,
)
FIX_WORDS = re.compile(
    r"\b(?:must|needs?|requires?|should|change|set|use|replace|drop|remove|fix|divid\w*|mismatch|"
    r"missing|add)\b",
    re.I,
)
NEGATED = re.compile(
    r"\b(?:no\s+errors?|not\s+an?\s+(?:error|problem)|nothing\s+wrong|correct\s+as\s+written|"
    r"(?:is|are)\s+(?:valid|fine|correct|accepted|legal|ok|okay|supported|allowed|real)|"
    r"only\s+(?:a\s+)?(?:warning|info)|works|does\s+not\s+apply|doesn't\s+apply|not\s+(?:reported|triggered))\b",
    re.I,
)
RULE_CODE = re.compile(r"\b[A-Z][A-Z0-9]+(?:_[A-Z0-9]+)+\b")


def name_pattern(name: str) -> re.Pattern:
    """A flag (--x-y), a dotted Bridge key (model.x_y) or an environment variable, as a whole token."""
    return re.compile(r"(?<![\w\-.])" + re.escape(name) + r"(?![\w\-])")


def mentions(text: str, name: str) -> bool:
    """The name as a whole token; a dotted Bridge key also by its last part (context_parallel_size), an
    engine field name also with spaces (expandable segments)."""
    if name_pattern(name).search(text):
        return True
    leaf = name.rsplit(".", 1)[-1]
    if "." in name and not name.startswith("-") and "_" in leaf and name_pattern(leaf).search(text):
        return True
    spaced = leaf.replace("_", " ")
    return (
        "_" in leaf and not name.startswith("-") and bool(re.search(rf"\b{re.escape(spaced)}\b", text, re.I))
    )


def error_sentences(answer: str) -> list[tuple[str, str]]:
    """(sentence, the sentence before it in the same paragraph or bullet) for every sentence that says
    something is wrong and does not say it is not."""
    out = []
    for seg in segments(answer):
        if seg.code:
            continue
        previous = ""
        for sentence in (s for s in SENTENCE_END.split(seg.text) if s.strip()):
            if ERROR_CLAIM.search(sentence) and not NEGATED.search(sentence):
                out.append((sentence, previous))
            previous = sentence
    return out


def codes_in(text: str, known: set[str]) -> list[str]:
    return [c for c in dict.fromkeys(RULE_CODE.findall(text)) if c in known]
