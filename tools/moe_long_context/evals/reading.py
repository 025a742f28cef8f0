"""Reading an answer as an expert would: the role a sentence plays, and the value it gives a quantity.

extract.py finds what is written; this module decides what it means:

- A sentence has a *lead*: the heading, bold lead-in or ``...:`` line its bullet stands under ("What must stay
  fixed:", "Alternatives:", "Not checked (not errors):"). A sentence is read together with its lead.
- A sentence can offer an *alternative* (a neighbour, a fallback, a value that would work, one that fails):
  a number there is not the value the answer gives, and a recommendation there is not the recommendation.
- A sentence can *refute* what it quotes ("the old product rule ..., which is wrong for MoE"): the quoted rule
  is not a claim of the answer.
- A number is the value of its label when it follows the label through a plain connector (``CP = 32``,
  ``DP is 2``), closes a worked formula that starts at the label (``DP = 128 / (4 x 4 x 4) = **2**``), or
  stands right before the label (``4096 tokens per rank``, ``52.9 GiB``).

All of it is a pure function of the text.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from . import extract

HEADING = re.compile(r"^\s*(?:#{1,6}\s|\*\*[^*]+\*\*\s*$|__[^_]+__\s*$)")
LEAD_LINE = re.compile(r":\**\s*$")
INLINE_LEAD = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s)?\s*[*_]*([A-Za-z][^:.\n]{0,40}):")
BULLET = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|\|)")

ALTERNATIVE = re.compile(
    r"\b(?:also\s+(?:legal|possible|works?|valid|fine|an?\s+option)|alternatives?|alternatively|neighbou?rs?|"
    r"fall\s*back|second\s+option|other\s+options?|next\s+(?:thing|option)\s+to\s+try|"
    r"would\s+(?:leave|give|make|need|be|mean|cost|halve|double|work)|could\s+also|"
    r"too\s+(?:little|small|few|large|big|many|much|short|long)|not\s+legal|illegal|(?:is\s+not|isn't)\W*$|"
    r"fails?\b|rejected|if\s+you\s+(?:want|need|prefer|must)|otherwise|versus|vs\.?)",
    re.I,
)
LEAD_ALTERNATIVE = re.compile(
    r"\b(?:alternatives?|alternatively|neighbou?rs?|fall\s*back|second\s+option|other\s+options?|would|"
    r"not\s+legal|illegal|rejected|if\s+you\s+(?:want|need|prefer|must)|otherwise)\b",
    re.I,
)
CONDITIONAL = re.compile(r"^\W*(?:if|unless|when|should)\b", re.I)
EACH_HOLDS = re.compile(
    r"\beach\s+((?:CP\s+|PP\s+|TP\s+)?(?:rank|shard|GPU))\s+(?:then\s+|now\s+)?(?:holds|gets|keeps|has|sees|"
    r"processes|takes|handles)\s+([^.;]*?)\btokens\b",
    re.I,
)
REFUTATION = re.compile(
    r"\b(?:wrong|incorrect|outdated|mistaken|misconception|myth|false|bogus|not\s+(?:the\s+)?(?:rule|"
    r"constraint)|does(?:n't|\s+not)\s+(?:apply|hold)|no\s+longer\s+(?:applies|holds|true)|old\s+(?:product\s+)?"
    r"rule|not\s+how)\b",
    re.I,
)
RECOMMEND = re.compile(
    r"\b(?:recommend\w*|use|using|start\w*|set|setting|pick|choose|go\s+with|keep|stays?|remains?|should|must|"
    r"needs?|switch\w*|answer|take|prefer\w*|move\s+to|run\s+with|fix\w*|drop\w*|remove|replace|add|change|"
    r"capture|enable|disable|turn|pass|instead|go\s+for|best|closest)\b|→|->",
    re.I,
)
# a sentence that says what is possible (two options, what a library supports) rather than what to do
OPTIONS = re.compile(r"\b(?:or|either|supports?|allows?|accepts?|only\s+with|can\s+be)\b", re.I)
NOT_CHECKED = re.compile(
    r"\bnot\s+(?:checked|errors?|an?\s+errors?|flagged|a\s+problem|problems?)\b|\bunchecked\b|"
    r"\bout\s+of\s+scope\b|\b(?:fine|ok|okay|clean)\s+as\s+(?:is|written)\b",
    re.I,
)


@dataclass(frozen=True)
class Unit:
    """A sentence of the prose with the lead it stands under ("" when none) and its paragraph or bullet."""

    text: str
    lead: str
    block: str

    @property
    def read(self) -> str:
        """The sentence as read: its lead, then the sentence."""
        return f"{self.lead} {self.text}".strip()

    def alternative(self) -> bool:
        return bool(ALTERNATIVE.search(self.text) or LEAD_ALTERNATIVE.search(self.lead))


def _strip(text: str) -> str:
    return text.strip().strip("#*_ ").strip()


def units(answer: str) -> list[Unit]:
    """Every sentence of the prose, with its lead: the last heading, or a line ending in ':' that the
    following bullets (or an indented sub-list) stand under."""
    out: list[Unit] = []
    heading = ""
    lead = ""
    for seg in extract.segments(answer):
        if seg.code:
            continue
        text = seg.text
        first_line = text.splitlines()[0] if text else ""
        if HEADING.match(first_line) and len(text) < 160:
            heading, lead = _strip(text), ""
            out.append(Unit(_strip(text), "", text))
            continue
        is_bullet = bool(BULLET.match(text))
        if not is_bullet:
            lead = ""
        context = " ".join(p for p in (heading, lead) if p)
        inline = INLINE_LEAD.match(text)
        for k, sentence in enumerate(s for s in extract.SENTENCE_END.split(text) if s.strip()):
            extra = inline.group(1) if inline and k else ""
            out.append(Unit(sentence, f"{context} {extra}".strip(), text))
        if LEAD_LINE.search(text):
            lead = _strip(text) if not is_bullet else f"{lead} {_strip(text)}".strip()
    return out


def contexts(answer: str) -> list[str]:
    """Views of the answer in which a claim and what it is about stand on one line: each sentence with its
    lead, each paragraph with the one before it (a flag on one line, what is wrong with it on the next, a
    code block and the sentence after it)."""
    out = [u.read for u in units(answer)]
    segs = [s.text.replace("\n", " ") for s in extract.segments(answer)]
    out += [f"{a} {b}" for a, b in itertools.pairwise(segs)]
    return out


# --------------------------------------------------------------------------- values of a quantity

CONNECTOR = re.compile(
    r"(?:[\s*`_]|=|:|≈|~|→|->|\(|\b(?:is|are|of|at|to|becomes|stays|remains|set\s+to|about|around|roughly|"
    r"approximately|gives|comes\s+to)\b)*$",
    re.I,
)
STOP = re.compile(r"[.;!?](?=\s|$)|\n")


def _clause(text: str, start: int) -> str:
    """Text from start to the end of its clause: a sentence end, or a comma outside parentheses."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth < 0:
                return text[start:i]
        elif (ch == "," and depth == 0 and not re.match(r",\d{3}(?!\d)", text[i:])) or (
            STOP.match(text, i) and not (ch == "." and text[i + 1 : i + 2].isdigit())
        ):
            return text[start:i]
    return text[start:]


# what may stand in a worked formula besides numbers and operators: the sizes' names, a few functions, units
FORMULA_WORDS = re.compile(
    r"\b(?:TP|CP|PP|EP|ETP|DP|EDP|VPP|MBS|GBS|M|GPUs?|max|min|lcm|gcd|layers?|tokens?|x|ranks?|global|micro|"
    r"batch(?:es)?|size|seq(?:uence)?|len(?:gth)?|experts?|heads?|world|num|count)\b|\b\w+_\w+\b|[*_`…-]|\.\.\.",
    re.I,
)
FINAL = re.compile(r"=\s*[*_`]*\s*(?:about\s+|~\s*)?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\d.,]\d)")


def _value(m: re.Match) -> float:
    return float(m.group(1).replace(",", "") + (m.group(2) or ""))


def values_for(line: str, label: re.Pattern) -> list[tuple[float, int, int]]:
    """(value, start, end) of each value the line gives the labelled quantity."""
    found: dict[tuple[int, int], float] = {}
    nums = extract.numbers(line)
    for hit in label.finditer(line):
        # label, then a number: through a plain connector, or closing a worked formula in the same clause
        after = _clause(line, hit.end())
        formula = list(FINAL.finditer(after))
        if formula and "=" in after:
            last = formula[-1]
            opening = re.search(r"=|:|\b(?:is|are)\b", after)  # the label's own words stand before it
            start = opening.end() if opening and opening.start() <= 40 else 0
            expression = FORMULA_WORDS.sub(" ", after[start : last.start()])
            if "=" not in after[last.end() :] and not re.search(r"[A-Za-z]", expression):
                found[(hit.end() + last.start(1), hit.end() + last.end())] = _value(last)
                continue
        for n, start, end in nums:
            if start < hit.end():
                continue
            gap = line[hit.end() : start]
            plain = len(gap) <= 24 and CONNECTOR.fullmatch(gap) and not re.search(r"\d", gap)
            operand = re.match(r"\s*[/x×*÷+^]\s*[\d(]", line[end:]) or gap.strip().startswith("==")
            if plain and not operand:
                found[(start, end)] = n
            break
        # a number right before the label (4096 tokens per rank, 52.9 GiB)
        for n, start, end in reversed(nums):
            if end > hit.start():
                continue
            gap = line[end : hit.start()]
            if re.fullmatch(r"[\s*`_]{0,3}", gap) and not re.search(
                r"\b(?:TP|CP|PP|EP|DP|ETP|EDP|VPP)\s*[=:]?\s*$", line[:start]
            ):
                found[(start, end)] = n
            break
    out = []
    for (start, end), n in sorted(found.items()):
        if re.match(r"[A-Za-z]", line[end : end + 1]) and not any(
            h.start() == end for h in label.finditer(line)
        ):
            continue  # 70s, 14.8B: not a value of this quantity
        if re.search(r"(?:high|low|mid)-$", line[:start]):
            continue
        out.append((n, start, end))
    return out


LEAD_VALUE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+[*_`]*(\d[\d,]*(?:\.\d+)?)(?![\d.])[*_`]*(?:\s|,|:|$)")


@dataclass(frozen=True)
class Stated:
    value: float
    where: str
    alternative: bool


def stated_values(answer: str, context: str | None) -> list[Stated]:
    """Every value the answer gives the quantity its label names, in order, each marked when it stands in
    a sentence that offers an alternative, a neighbour or a value that fails."""
    label = re.compile(context, re.I) if context else re.compile(r"(?!)")
    out: list[Stated] = []
    for u in units(answer):
        line = EACH_HOLDS.sub(r"\2tokens per \1", u.text)
        pairs = values_for(line, label) if context else [(n, s, e) for n, s, e in extract.numbers(line)]
        lead_value = LEAD_VALUE.match(line)
        if context and lead_value and label.search(u.lead) and not pairs:
            pairs = [
                (extract.numbers(line[lead_value.start(1) :])[0][0], lead_value.start(1), lead_value.end(1))
            ]
        aside = u.alternative() or bool(CONDITIONAL.search(u.text))
        for n, start, end in pairs:
            out.append(Stated(n, extract.snippet(line, start, end), aside))
    for seg in extract.segments(answer):
        if not seg.code:
            continue
        for line in seg.lines():
            pairs = values_for(line, label) if context else [(n, s, e) for n, s, e in extract.numbers(line)]
            for n, start, end in pairs:
                out.append(Stated(n, extract.snippet(line, start, end), False))
    return out


# --------------------------------------------------------------------------- paraphrases of lists

RANK_ITEM = re.compile(
    r"\b(?:PP\s+)?(?:ranks?|stages?)\s+(\d+)(?:\s*(?:-|–|to|through)\s*(\d+))?[*_\s]*[:=]", re.I
)
LAYERS = re.compile(r"(\d+)[*_\s]*(?:decoder\s+|transformer\s+)?layers?\b", re.I)


def rank_lists(answer: str) -> list[str]:
    """Per-rank counts written rank by rank ("rank 0: 7, ranks 1-6: 8 each, rank 7: 6", or one bullet a rank)
    as the list they spell ("[7, 8, 8, 8, 8, 8, 8, 6]")."""
    text = "\n".join(s.text for s in extract.segments(answer))
    items = list(RANK_ITEM.finditer(text))
    runs: list[list[str]] = []
    last = -1
    for k, m in enumerate(items):
        first, final = int(m.group(1)), int(m.group(2) or m.group(1))
        end = items[k + 1].start() if k + 1 < len(items) else len(text)
        body = (
            text[m.end() : end].split("\n")[0]
            if "\n" in text[m.end() : end].strip("\n ")
            else text[m.end() : end]
        )
        count = LAYERS.search(body) or re.search(r"\d+", body)
        if count is None:
            continue
        if first != last + 1 or not runs:
            runs.append([])
        runs[-1] += [count.group(1) if count.re is LAYERS else count.group(0)] * (max(0, final - first) + 1)
        last = final
    return ["[" + ", ".join(run) + "]" for run in runs if len(run) >= 2]


def claims(pattern: str, answer: str) -> tuple[list[str], list[str]]:
    """Where the answer makes the claim a pattern describes, and where it only quotes it to call it wrong.
    Each sentence is read with its lead; a claim that spans sentences (a flag on one line, what is said of it
    on the next) is found in the joined views, and in the text as written."""
    rx = re.compile(pattern, re.I | re.M)
    made: list[str] = []
    quoted: list[str] = []
    seen_in_unit = False
    for view in [u.text for u in units(answer)] + [
        line for s in extract.segments(answer) if s.code for line in s.lines()
    ]:
        for m in rx.finditer(view):
            seen_in_unit = True
            rest = view[: m.start()] + " " + view[m.end() :]
            where = extract.snippet(view, m.start(), m.end())
            (quoted if REFUTATION.search(rest) else made).append(where)
    if not seen_in_unit:
        for view in [answer, *contexts(answer)]:
            if m := rx.search(view):
                made.append(extract.snippet(view, m.start(), m.end()))
                break
    return made, quoted


# --------------------------------------------------------------------------- lint claims in plain words


def plain_mention(text: str, flag: str) -> bool:
    """A flag or key named in plain words: --tp-comm-overlap as "TP comm overlap", model.cp_comm_type as
    "cp comm type" (two words at least, so a single common word is never taken for a flag)."""
    if extract.mentions(text, flag):
        return True
    leaf = flag.lstrip("-").rsplit(".", 1)[-1]
    words = [w for w in re.split(r"[-_]", leaf) if w]
    if len(words) < 2:
        return False
    return bool(re.search(r"(?<![\w-])" + r"[-_ ]".join(map(re.escape, words)) + r"(?![\w-])", text, re.I))


def disclaimed(unit: Unit) -> bool:
    """A sentence (or the list it stands in) that says what it names is fine or was not checked."""
    return bool(
        extract.NEGATED.search(unit.text) or NOT_CHECKED.search(unit.text) or NOT_CHECKED.search(unit.lead)
    )
