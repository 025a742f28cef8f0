"""Pipeline splits: which decoder layers (and embedding, loss, MTP) each (PP rank, virtual stage) holds.

Mirrors Megatron Core 0.19: ``transformer/pipeline_parallel_layer_layout.py`` (layout strings),
``transformer/transformer_config.py`` (uneven first/last and account-for checks) and
``transformer/transformer_block.py::get_num_layers_to_build`` (the plain split, checked at model build).
A failed split returns ``SplitProblem``s, not exceptions; ``propose_splits`` finds settings that work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

LAYOUT_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
MAX_LAYOUT_STAGES = 4096


@dataclass(frozen=True)
class Stage:
    """Contents of one virtual pipeline stage."""

    decoders: int = 0
    embedding: bool = False
    loss: bool = False
    mtp: int = 0

    def to_layout(self) -> str:
        body = ("E" if self.embedding else "") + _repeat("t", self.decoders) + _repeat("m", self.mtp)
        return body + ("L" if self.loss else "")


def _repeat(char: str, count: int) -> str:
    return char * count if count <= 3 else f"{char}*{count}"


@dataclass(frozen=True)
class SplitProblem:
    code: str  # a rule code from rules.yaml
    message: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class PipelineSplit:
    """stages[pp_rank][vp_stage]; ``vpp`` is 1 without interleaving."""

    pp: int
    vpp: int
    stages: tuple[tuple[Stage, ...], ...]
    method: str  # plain | account_for | uneven | layout

    def rank_decoders(self, pp_rank: int) -> int:
        return sum(s.decoders for s in self.stages[pp_rank])

    @property
    def decoders_per_rank(self) -> list[int]:
        return [self.rank_decoders(r) for r in range(self.pp)]

    def layout_string(self) -> str:
        """The split written as a --pipeline-model-parallel-layout string (virtual-stage order)."""
        flat = [self.stages[r][v].to_layout() for v in range(self.vpp) for r in range(self.pp)]
        return compress_layout(flat)


@dataclass
class SplitResult:
    split: PipelineSplit | None
    problems: list[SplitProblem] = field(default_factory=list)
    vpp: int | None = None  # the VPP in effect (derived from a layout string when given)


# --------------------------------------------------------------------------- layout strings


class LayoutSyntaxError(ValueError):
    pass


def parse_layout(text: str) -> list[list[str]]:
    """Parse a layout string into a flat list of stages (virtual-stage order), like Megatron does."""
    body = text.replace(",", "")
    body = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * _bounded(int(m.group(2))), body)
    body = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * _bounded(int(m.group(2))), body)
    if len(body) > 200_000:
        raise LayoutSyntaxError("the layout unrolls to more than 200000 characters")
    stages = []
    for chunk in body.split("|"):
        bad = [c for c in chunk if c not in LAYOUT_CHARS]
        if bad and bad[0] in "()*":
            raise LayoutSyntaxError(_repeat_problem(text, bad[0]))
        if bad:
            raise LayoutSyntaxError(
                f"invalid layer character {bad[0]!r} in stage {chunk!r}; layer characters: E, L, t, m (with | "
                "between stages, (...)*n and x*n repeats, commas for readability)"
            )
        stages.append(list(chunk))
    if len(stages) > MAX_LAYOUT_STAGES:
        raise LayoutSyntaxError(f"the layout has {len(stages)} stages, more than {MAX_LAYOUT_STAGES}")
    return stages


def _repeat_problem(text: str, char: str) -> str:
    """Why a '(', ')' or '*' is left once Megatron's two repeat patterns, (...)*n and x*n, are unrolled."""
    opening, closing = text.count("("), text.count(")")
    if opening != closing:
        return f"unbalanced parentheses in {text!r}: {opening} '(' and {closing} ')'"
    if char == "*":
        return f"a '*' in {text!r} without a repeat count after it: write (...)*n or x*n"
    return (
        f"parentheses in {text!r} that Megatron does not unroll: it unrolls (...)*n, with a repeat count and no "
        "parentheses inside, and x*n"
    )


def _bounded(n: int) -> int:
    if n > 100_000:
        raise LayoutSyntaxError(f"repeat count {n} is too large")
    return n


def compress_layout(stages: list[str]) -> str:
    """Join stage strings with '|', writing runs of identical stages as '(s|)*n'."""
    if not stages:
        return ""
    parts: list[str] = []
    i = 0
    last = len(stages) - 1
    while i < len(stages):
        j = i
        while j + 1 < last and stages[j + 1] == stages[i]:
            j += 1
        run = j - i + 1
        if i == last:
            parts.append(stages[i])
        elif run > 1:
            parts.append(f"({stages[i]}|)*{run}")
        else:
            parts.append(stages[i] + "|")
        i = j + 1
    return "".join(parts)


@lru_cache(maxsize=4096)
def split_from_layout(text: str, pp: int, num_layers: int, mtp: int) -> SplitResult:
    """Validate a layout string like Megatron (cached: treat the result as read-only)."""
    keys = ("pipeline_layout",)
    try:
        flat = parse_layout(text)
    except LayoutSyntaxError as exc:
        return SplitResult(None, [SplitProblem("PP_LAYOUT_INVALID", str(exc), keys)])
    problems: list[SplitProblem] = []
    if len(flat) % pp:
        problems.append(
            SplitProblem(
                "PP_LAYOUT_INVALID",
                f"the layout has {len(flat)} stages, which does not divide by PP={pp}",
                ("pipeline_layout", "pp"),
            )
        )
        return SplitResult(None, problems)
    vpp = len(flat) // pp
    flat_chars = [c for stage in flat for c in stage]
    checks = [
        (flat_chars[:1] == ["E"], "the first layer must be the embedding E"),
        (flat_chars[-1:] == ["L"], "the last layer must be the loss L"),
        (flat_chars.count("E") == 1, "the embedding E must appear exactly once"),
        (flat_chars.count("L") == 1, "the loss L must appear exactly once"),
        (
            flat_chars.count("t") == num_layers,
            f"the layout has {flat_chars.count('t')} decoder layers t but the model has {num_layers}",
        ),
        (
            flat_chars.count("m") == mtp,
            f"the layout has {flat_chars.count('m')} MTP layers m but mtp_num_layers is {mtp}",
        ),
    ]
    if "m" in flat_chars:
        first_m = flat_chars.index("m")
        checks.append(("t" not in flat_chars[first_m:], "decoder layers must come before MTP layers"))
        holders = [s for s in flat if "m" in s]
        checks.append((len(holders) == 1, "all MTP layers must be in one virtual stage"))
        idx = next(i for i, s in enumerate(flat) if "m" in s)
        vp_stage = idx // pp
        checks.append((vp_stage == vpp - 1, "MTP layers must be in the last virtual stage of their PP rank"))
    for ok, message in checks:
        if not ok:
            problems.append(SplitProblem("PP_LAYOUT_INVALID", message, keys))
    if problems:
        return SplitResult(None, problems, vpp)
    stages = tuple(
        tuple(
            Stage(
                decoders=flat[v * pp + r].count("t"),
                embedding="E" in flat[v * pp + r],
                loss="L" in flat[v * pp + r],
                mtp=flat[v * pp + r].count("m"),
            )
            for v in range(vpp)
        )
        for r in range(pp)
    )
    return SplitResult(PipelineSplit(pp, vpp, stages, "layout"), [], vpp)


# --------------------------------------------------------------------------- flag-driven splits


def _chunks(per_rank: int, vpp: int) -> list[int]:
    return [per_rank // vpp] * vpp


@lru_cache(maxsize=8192)
def split_pipeline(
    num_layers: int,
    pp: int,
    vpp: int | None,
    mtp: int = 0,
    *,
    layout: str | None = None,
    first: int | None = None,
    last: int | None = None,
    account_embedding: bool = False,
    account_loss: bool = False,
) -> SplitResult:
    """Split ``num_layers`` over ``pp`` ranks (x ``vpp`` virtual stages) the way Megatron would (cached:
    treat the result as read-only)."""
    if layout is not None:
        result = split_from_layout(layout, pp, num_layers, mtp)
        if vpp is not None and result.vpp is not None and vpp != result.vpp and vpp > 1:
            mismatch = SplitProblem(
                "PP_LAYOUT_VPP_MISMATCH",
                f"vpp={vpp} but the layout has {result.vpp} virtual stages per PP rank",
                ("vpp", "pipeline_layout"),
            )
            return SplitResult(None, [*result.problems, mismatch], result.vpp)
        return result

    v = vpp or 1
    problems: list[SplitProblem] = []
    uneven = first is not None or last is not None
    if uneven and (account_embedding or account_loss):
        problems.append(
            SplitProblem(
                "PP_UNEVEN_WITH_ACCOUNT_FOR",
                "num_layers_in_first/last_pipeline_stage cannot be combined with "
                "account_for_embedding/loss_in_pipeline_split",
                ("num_layers_in_first_pipeline_stage", "account_for_embedding_in_pipeline_split"),
            )
        )
        return SplitResult(None, problems, vpp)

    if uneven:
        return _split_uneven(num_layers, pp, vpp, mtp, first, last)

    total = num_layers + int(account_embedding) + int(account_loss)
    method = "account_for" if (account_embedding or account_loss) else "plain"
    keys = ("pp", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
    if total % pp:
        what = f"{num_layers} layers" + (
            f" + {total - num_layers} for embedding/loss = {total}" if method != "plain" else ""
        )
        problems.append(
            SplitProblem("PP_LAYERS_NOT_DIVISIBLE", f"{what} do not divide evenly over PP={pp}", keys)
        )
        return SplitResult(None, problems, vpp)
    per_rank = total // pp
    if pp > 1 and vpp is not None and per_rank % v:
        problems.append(
            SplitProblem(
                "PP_LAYERS_NOT_DIVISIBLE_VPP",
                f"{per_rank} layers per PP rank do not divide over VPP={v} virtual stages",
                ("vpp", *keys),
            )
        )
        return SplitResult(None, problems, vpp)
    stages = []
    for r in range(pp):
        row = []
        for s, count in enumerate(_chunks(per_rank, v)):
            is_first = r == 0 and s == 0
            is_last = r == pp - 1 and s == v - 1
            decoders = count - int(account_embedding and is_first) - int(account_loss and is_last)
            if decoders < 0:
                problems.append(
                    SplitProblem(
                        "PP_LAYERS_NOT_DIVISIBLE_VPP",
                        "not enough layers in the first/last virtual stage for the embedding/loss",
                        keys,
                    )
                )
                return SplitResult(None, problems, vpp)
            row.append(Stage(decoders, embedding=is_first, loss=is_last, mtp=mtp if is_last else 0))
        stages.append(tuple(row))
    return SplitResult(PipelineSplit(pp, v, tuple(stages), method), [], vpp)


def _split_uneven(num_layers: int, pp: int, vpp: int | None, mtp: int, first: int | None, last: int | None):
    problems: list[SplitProblem] = []
    v = vpp or 1
    middle_layers, middle_ranks = num_layers, pp
    for name, value in (("first", first), ("last", last)):
        if value is None:
            continue
        key = f"num_layers_in_{name}_pipeline_stage"
        if vpp is not None and value % vpp:
            problems.append(
                SplitProblem(
                    "PP_UNEVEN_NOT_DIVISIBLE",
                    f"{value} layers on the {name} stage do not divide over VPP={vpp}",
                    (key, "vpp"),
                )
            )
        middle_layers -= value
        middle_ranks -= 1
    keys = ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage", "pp")
    if middle_ranks < 0:
        problems.append(
            SplitProblem("PP_UNEVEN_NOT_DIVISIBLE", f"PP={pp} has no room for first and last stages", keys)
        )
    elif bool(middle_layers > 0) != bool(middle_ranks > 0) or middle_layers < 0:
        problems.append(
            SplitProblem(
                "PP_UNEVEN_NOT_DIVISIBLE",
                f"the first and last stages take {-middle_layers} more layers than the model has"
                if middle_layers < 0
                else f"{middle_layers} layers remain for {middle_ranks} middle PP stages",
                keys,
            )
        )
    elif middle_ranks and middle_layers % middle_ranks:
        problems.append(
            SplitProblem(
                "PP_UNEVEN_NOT_DIVISIBLE",
                f"{middle_layers} middle layers do not divide over {middle_ranks} middle PP stages",
                keys,
            )
        )
    elif middle_ranks and vpp is not None and (middle_layers // middle_ranks) % vpp:
        problems.append(
            SplitProblem(
                "PP_UNEVEN_NOT_DIVISIBLE",
                f"{middle_layers // middle_ranks} layers per middle PP stage do not divide over VPP={vpp}",
                (*keys, "vpp"),
            )
        )
    if problems:
        return SplitResult(None, problems, vpp)
    per_middle = middle_layers // middle_ranks if middle_ranks else 0
    stages = []
    for r in range(pp):
        count = per_middle
        if r == 0 and first is not None:
            count = first
        if r == pp - 1 and last is not None:
            count = last
        row = []
        for s, chunk in enumerate(_chunks(count, v)):
            is_first, is_last = r == 0 and s == 0, r == pp - 1 and s == v - 1
            row.append(Stage(chunk, embedding=is_first, loss=is_last, mtp=mtp if is_last else 0))
        stages.append(tuple(row))
    return SplitResult(PipelineSplit(pp, v, tuple(stages), "uneven"), [], vpp)


# --------------------------------------------------------------------------- proposals


@dataclass(frozen=True)
class SplitProposal:
    """Settings that split the layers validly, and how they read as arguments."""

    settings: dict
    description: str
    decoders_per_rank: tuple[int, ...]


def balanced_layout(num_layers: int, pp: int, vpp: int, mtp: int) -> str | None:
    """A layout string spreading E, the decoders, the MTP layers and L as evenly as possible.

    Counts the embedding, the loss and each MTP layer as one unit of work, as Megatron Bridge's
    DeepSeek-V3 recipe does ('Et|(tt|)*30mL' for 61 layers on PP 8 x VPP 4).
    """
    stages = pp * vpp
    units = num_layers + 2 + mtp
    if stages > units - mtp - 1 or stages > MAX_LAYOUT_STAGES:
        return None
    base, extra = divmod(units, stages)
    sizes = [base] * stages
    # Give the extra units to the middle stages, keeping the ends (embedding, logits) lighter.
    order = sorted(range(stages), key=lambda i: abs(i - (stages - 1) / 2))
    for i in order[:extra]:
        sizes[i] += 1
    tail = mtp + 1
    if sizes[-1] < tail:
        deficit = tail - sizes[-1]
        sizes[-1] = tail
        for i in sorted(range(stages - 1), key=lambda i: -sizes[i]):
            if deficit == 0:
                break
            if sizes[i] > 1:
                sizes[i] -= 1
                deficit -= 1
        if deficit:
            return None
    tokens = ["E"] + ["t"] * num_layers + ["m"] * mtp + ["L"]
    flat, pos = [], 0
    for size in sizes:
        flat.append("".join(tokens[pos : pos + size]))
        pos += size
    if any(not s for s in flat):
        return None
    text = compress_layout([_compress_stage(s) for s in flat])
    result = split_from_layout(text, pp, num_layers, mtp)
    return text if result.split is not None else None


def _compress_stage(stage: str) -> str:
    return re.sub(r"t{4,}", lambda m: f"t*{len(m.group(0))}", stage)


def propose_splits(
    num_layers: int, pp: int, vpp: int | None, mtp: int, limit: int = 4
) -> list[SplitProposal]:
    """Settings (account-for flags, uneven first/last, or a layout string) that split validly."""
    proposals: list[SplitProposal] = []

    def add(settings: dict, description: str, result: SplitResult) -> None:
        if result.split is not None and len(proposals) < limit:
            proposals.append(SplitProposal(settings, description, tuple(result.split.decoders_per_rank)))

    if pp == 1:
        return proposals
    plain = split_pipeline(num_layers, pp, vpp, mtp)
    add({}, "the plain split", plain)
    for emb, loss in ((True, True), (True, False), (False, True)):
        settings = {}
        if emb:
            settings["account_for_embedding_in_pipeline_split"] = True
        if loss:
            settings["account_for_loss_in_pipeline_split"] = True
        result = split_pipeline(num_layers, pp, vpp, mtp, account_embedding=emb, account_loss=loss)
        names = " and ".join(n for n, on in (("embedding", emb), ("loss", loss)) if on)
        add(settings, f"count the {names} as a layer in the split", result)
    uneven = _uneven_candidate(num_layers, pp, vpp)
    if uneven is not None:
        first, last = uneven
        result = split_pipeline(num_layers, pp, vpp, mtp, first=first, last=last)
        add(
            {"num_layers_in_first_pipeline_stage": first, "num_layers_in_last_pipeline_stage": last},
            f"uneven split: {first} layers on the first stage and {last} on the last",
            result,
        )
    text = balanced_layout(num_layers, pp, vpp or 1, mtp)
    if text is not None:
        add(
            {"pipeline_layout": text},
            f"an explicit layout {text!r}",
            split_from_layout(text, pp, num_layers, mtp),
        )
    return proposals


def _uneven_candidate(num_layers: int, pp: int, vpp: int | None) -> tuple[int, int] | None:
    """First/last stage sizes (multiples of VPP, lighter than the middle) that leave a valid middle."""
    v = vpp or 1
    middle_ranks = pp - 2
    best = None
    per_middle_options = [0] if middle_ranks <= 0 else range(v, num_layers + 1, v)
    for per_middle in per_middle_options:
        rest = num_layers - per_middle * max(middle_ranks, 0)
        if rest < 2 * v:
            break
        half = rest // 2 // v * v
        for first in {half, half + v}:
            last = rest - first
            if first <= 0 or last <= 0 or last % v:
                continue
            # prefer ends no heavier than the middle, then balance
            heavy_ends = middle_ranks > 0 and max(first, last) > per_middle
            score = (
                heavy_ends,
                abs(first - last) + (abs(per_middle - (first + last) / 2) if middle_ranks > 0 else 0),
            )
            if best is None or score < best[0]:
                best = (score, first, last)
    return None if best is None else best[1:]
