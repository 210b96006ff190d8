"""Markdown and HTML rendering of report sections (tables, images), no template engine needed."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:.{digits}f}"
    return str(v)


class Document:
    """A report built once and written as both Markdown and HTML."""

    def __init__(self, title: str):
        self.title = title
        self.blocks: list[tuple[str, Any]] = []

    def h2(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.blocks.append(("table", (list(header), [[fmt(c) for c in r] for r in rows])))

    def image(self, path: str, alt: str) -> None:
        self.blocks.append(("img", (path, alt)))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for kind, v in self.blocks:
            if kind == "h2":
                out += [f"## {v}", ""]
            elif kind == "p":
                out += [v, ""]
            elif kind == "table":
                header, rows = v
                out.append("| " + " | ".join(header) + " |")
                out.append("|" + "|".join("---" for _ in header) + "|")
                out += ["| " + " | ".join(r) + " |" for r in rows]
                out.append("")
            elif kind == "img":
                out += [f"![{v[1]}]({v[0]})", ""]
            elif kind == "code":
                out += ["```", v, "```", ""]
        return "\n".join(out)

    def html(self) -> str:
        e = html.escape
        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(self.title)}</title>",
               "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
               "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
               "th{background:#eee}img{max-width:100%}</style></head><body>", f"<h1>{e(self.title)}</h1>"]
        for kind, v in self.blocks:
            if kind == "h2":
                out.append(f"<h2>{e(v)}</h2>")
            elif kind == "p":
                out.append(f"<p>{e(v)}</p>")
            elif kind == "table":
                header, rows = v
                out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
                out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows]
                out.append("</table>")
            elif kind == "img":
                out.append(f"<p><img src='{e(v[0])}' alt='{e(v[1])}'></p>")
            elif kind == "code":
                out.append(f"<pre>{e(v)}</pre>")
        out.append("</body></html>")
        return "\n".join(out)

    def write(self, out_dir: Path, stem: str = "report") -> Path:
        md = out_dir / f"{stem}.md"
        md.write_text(self.markdown())
        (out_dir / f"{stem}.html").write_text(self.html())
        return md
