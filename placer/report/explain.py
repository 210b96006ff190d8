"""What :func:`placer.api.explain` returns: the per-op rows, printable as a table."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from placer.report.console import add_row, make_table, render_text
from placer.report.render import markdown_table


class Explanation(list):
    """One dict per op (a list, as before): ``op``, ``op_type`` (None when unknown), ``target`` (the
    chosen one), ``reason``, ``cheapest`` (its cheapest target), ``cost_ms`` ({target: ms}, inf where
    unsupported) and ``gain_forgone_ms`` (chosen cost - cheapest cost).

    ``print(explanation)`` shows a table (op, op type, the cost on each target, chosen target, why),
    so does rich (``__rich__``) and IPython; :meth:`to_markdown` gives the same table as Markdown.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]] = (), targets: Sequence[str] = ()):
        super().__init__(dict(r) for r in rows)
        self.targets = tuple(targets) or tuple(dict.fromkeys(t for r in self for t in r.get("cost_ms", {})))

    @property
    def rows(self) -> list[dict]:
        """The rows as a plain list of dicts."""
        return list(self)

    def counts(self) -> dict[str, int]:
        """How many ops per reason."""
        return dict(Counter(r["reason"] for r in self))

    def title(self) -> str:
        by = ", ".join(f"{n} {why}" for why, n in sorted(self.counts().items(), key=lambda kv: -kv[1]))
        return f"placement of {len(self)} ops on {len(self.targets)} targets" + (f": {by}" if by else "")

    def header(self) -> list[str]:
        types = [] if all(r.get("op_type") is None for r in self) else ["op type"]
        return ["op", *types, *(f"{t} ms" for t in self.targets), "chosen", "why"]

    def table_rows(self) -> list[list[str]]:
        """The table's cells as text: costs with 4 significant digits, "n/a" where unsupported, the
        chosen target's cost marked with "*"."""
        with_types = "op type" in self.header()
        out = []
        for r in self:
            costs = []
            for t in self.targets:
                c = r.get("cost_ms", {}).get(t, math.inf)
                cell = f"{c:.4g}" if math.isfinite(c) else "n/a"
                costs.append(cell + (" *" if t == r["target"] else ""))
            out.append([r["op"], *([r.get("op_type") or "-"] if with_types else []), *costs, r["target"],
                        why(r)])
        return out

    def __rich__(self):
        numeric = [f"{t} ms" for t in self.targets]
        table = make_table(self.header(), title=self.title(), justify=numeric)
        for cells in self.table_rows():
            add_row(table, cells)
        return table

    def __str__(self) -> str:
        return render_text(self.__rich__())

    def _repr_pretty_(self, p, cycle) -> None:  # IPython
        p.text("Explanation(...)" if cycle else str(self))

    def to_markdown(self) -> str:
        """The table as GitHub Markdown, under a one-line summary."""
        return "\n".join([self.title() + " (* = chosen)", "", *markdown_table(self.header(), self.table_rows())]) + "\n"

    def _repr_markdown_(self) -> str:  # Jupyter
        return self.to_markdown()


def why(row: Mapping[str, Any]) -> str:
    """One phrase for a row's reason, naming the cheaper target it gave up where there is one."""
    reason, gain, cheapest = row["reason"], row.get("gain_forgone_ms", 0.0), row.get("cheapest")
    if reason == "memory":
        return f"memory: {cheapest} {gain:.3g} ms cheaper, but its memory cap is full"
    if reason == "transfers":
        return f"transfers: {cheapest} {gain:.3g} ms cheaper, but moving tensors costs more"
    if reason == "only supported target":
        return "only target that supports it"
    return reason
