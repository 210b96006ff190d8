"""Progress bars of the profiling campaigns (``describe`` what is measured, ``advance`` when done)."""

from __future__ import annotations

import sys

from placer.safe_io import printable

__all__ = ["NoBar", "RichBar", "progress_bar"]


class NoBar:
    """No bar: progress disabled, nothing to count or no terminal."""

    def describe(self, text: str) -> None:
        pass

    def advance(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class RichBar(NoBar):
    """A rich progress bar on stderr: done/total, elapsed, eta and what is being measured."""

    def __init__(self, total: int):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("[bold]profile"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"),
                                 console=Console(stderr=True), transient=False)
        self.task = self.progress.add_task("", total=total)

    def describe(self, text: str) -> None:
        from rich.markup import escape

        self.progress.update(self.task, description=escape(printable(text[:48], newlines=False)))

    def advance(self) -> None:
        self.progress.advance(self.task)

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)


def progress_bar(enabled: bool, total: int) -> NoBar:
    """The bar of a campaign of ``total`` measurements: a :class:`RichBar` where enabled and stderr is a
    terminal, else a :class:`NoBar`."""
    if not enabled or total == 0 or not sys.stderr.isatty():
        return NoBar()
    try:
        return RichBar(total)
    except Exception:  # pragma: no cover - rich missing or broken terminal
        return NoBar()
