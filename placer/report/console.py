"""Consoles and tables for people: nothing cut silently.

Rich sizes a console to the terminal, and to 80 columns when stdout is not one (a pipe, a CI log,
``> file``): wide tables then lose columns to ellipses. :func:`make_console` keeps the terminal's
width on a terminal and takes at least :data:`MIN_WIDTH` columns otherwise; :func:`make_table`
makes every column fold (wrap inside the cell) instead of ellipsizing, so long cells such as error
messages are shown whole. :func:`add_row` adds cells as plain text: an error message such as
``expected [1, 3] ... [/x]`` is shown as written, not read as rich markup (which can raise).
Text from a user's files goes through :func:`placer.safe_io.printable` first (escape sequences
escaped, never sent to the terminal).
"""

from __future__ import annotations

import io
import shutil
from typing import Any, Iterable, Sequence

from placer.safe_io import printable

#: console width when the output is not a terminal
MIN_WIDTH = 160


def make_console(*, stderr: bool = False, min_width: int = MIN_WIDTH):
    """A rich Console on stdout (or stderr): the terminal's width on a terminal, else
    ``max($COLUMNS or 80, min_width)`` columns."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    width = max(shutil.get_terminal_size(fallback=(80, 24)).columns, min_width)
    return Console(stderr=stderr, width=width)


def make_table(columns: Sequence[str], *, title: str | None = None, justify: Iterable[str] = ()):
    """A rich Table whose columns fold long cells (never "..."); columns named in ``justify`` are
    right-aligned (numbers)."""
    from rich.markup import escape
    from rich.table import Table

    right = set(justify)
    table = Table(title=escape(printable(title)) if title is not None else None)  # a title is never markup
    for col in columns:
        table.add_column(col, overflow="fold", justify="right" if col in right else "left")
    return table


def add_row(table, cells: Iterable[Any]) -> None:
    """Add ``cells`` to ``table`` as plain text (``None`` -> "-"), never parsed as markup, control
    characters escaped (a name from a model cannot send terminal escape sequences)."""
    from rich.text import Text

    table.add_row(*(c if isinstance(c, Text) else Text("-" if c is None else printable(c)) for c in cells))


def render_text(renderable: Any, width: int = 1000) -> str:
    """A rich renderable as plain text (no colour codes) at its natural width, up to ``width``."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False, force_jupyter=False,
            force_interactive=False, soft_wrap=False).print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())
