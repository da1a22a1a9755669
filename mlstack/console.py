"""Text output shared by every command: problem lines and plain-text tables.

`mlstack` (all subcommands), `app.py` and `python -m mlstack.synth_all` print user errors through
`print_problems` and tables through `render_table`, so every command looks the same. `--json` output does not
come through here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from mlstack.errors import MlstackError

__all__ = ["print_problems", "render_table"]


def print_problems(err: MlstackError, file: TextIO | None = None) -> None:
    """One `error: <problem>` line per problem of `err` (on stderr unless `file` is given)."""
    out = sys.stderr if file is None else file
    for line in err.problems:
        print(f"error: {line}", file=out)


def render_table(headers: Sequence[str] | None, rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """Aligned plain-text table, two spaces between columns, no trailing blanks.

    With `headers`, a header line and a dashed rule come first; with None, only the rows (a bare aligned list).
    Columns listed in `right` are right-aligned.
    """
    columns = len(headers) if headers is not None else max((len(r) for r in rows), default=0)
    widths = [len(h) for h in headers] if headers is not None else [0] * columns
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    head = [line(headers), line(["-" * w for w in widths])] if headers is not None else []
    return "\n".join([*head, *(line(r) for r in rows)])
