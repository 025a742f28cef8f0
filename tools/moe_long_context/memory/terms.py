"""A named memory term: what one rank holds, in bytes, and how the number was computed."""

from __future__ import annotations

from dataclasses import dataclass

GIB = float(2**30)


@dataclass
class Term:
    """One named memory term of one rank, with how it was computed."""

    name: str
    bytes: float
    basis: str
