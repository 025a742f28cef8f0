"""The ``moe-lc`` command: the tool faces' CLI plus the ``eval`` commands of the layer above them.

This entry module sits on top of every layer, so the CLI face never imports the evals that call it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .evals.cli import add_commands as _add_eval_commands
from .faces import cli as _face

if _add_eval_commands not in _face.EXTENSIONS:
    _face.EXTENSIONS.append(_add_eval_commands)

build_parser = _face.build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``moe-lc`` with ``argv`` (default: the process arguments); returns the exit code."""
    return _face.main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
