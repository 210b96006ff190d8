"""Markdown and HTML rendering of report sections (tables, images), no template engine needed.

A :class:`Document` is written as Markdown (``report.md``, readable as text and on GitHub) and the
same Markdown rendered to HTML by ``markdown-it-py`` (CommonMark + tables; raw HTML in the text is
escaped, not passed through), so that the two never disagree. Images are referenced by relative
paths: keep the PNGs next to the report.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any, Sequence

from placer.safe_io import printable

#: minimal style for the HTML report: readable tables (borders, header, zebra rows, numbers on the right)
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;
     line-height:1.45;color:#222}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.92em;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #c8c8c8;padding:3px 9px;vertical-align:top}
th{background:#eef0f3;text-align:left}
tbody tr:nth-child(even){background:#f8f9fa}
td{font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto}
pre{background:#f6f8fa;padding:0.8em;overflow-x:auto;font-size:0.88em}
code{font-size:0.92em}
"""

_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|&])")
_LOOSE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?( ?%|x| \*)?$")


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:.{digits}f}"
    return str(v)


def md_escape(text: str) -> str:
    """``text`` as literal Markdown inline text (a table cell): no emphasis, links, HTML or cell breaks."""
    text = " ".join(str(text).split())  # a newline would end the table row
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _LOOSE_UNDERSCORE.sub(r"\\_", text)


def _numeric_column(cells: Sequence[str]) -> bool:
    vals = [c for c in cells if c not in ("", "-", "n/a")]
    return bool(vals) and all(_NUMBER.match(c) for c in vals)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A GitHub-flavoured Markdown table (cells escaped, numeric columns right-aligned)."""
    cells = [[fmt(c) for c in r] for r in rows]
    width = len(header)
    cells = [(r + [""] * width)[:width] for r in cells]
    align = ["---:" if _numeric_column([r[i] for r in cells]) else "---" for i in range(width)]
    out = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in cells]
    return out


def markdown_to_html(text: str, title: str = "") -> str:
    """A standalone HTML page of Markdown ``text`` (CommonMark + tables, raw HTML escaped)."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title>\n<style>{CSS}</style></head>\n<body>\n{body}</body></html>\n")


class Document:
    """A report built once and written as both Markdown and HTML."""

    def __init__(self, title: str):
        self.title = title
        self.blocks: list[tuple[str, Any]] = []

    def h2(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def h3(self, text: str) -> None:
        self.blocks.append(("h3", text))

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
            elif kind == "h3":
                out += [f"### {v}", ""]
            elif kind == "p":
                out += [v, ""]
            elif kind == "table":
                header, rows = v
                out += markdown_table(header, rows) + [""]
            elif kind == "img":
                path, alt = v
                target = f"<{path}>" if re.search(r"[\\s()<>]", path) else path
                out += [f"![{md_escape(alt)}]({target})", ""]
            elif kind == "code":
                longest = max((len(m) for m in re.findall(r"`+", v)), default=0)
                fence = "`" * max(3, longest + 1)
                out += [fence, v, fence, ""]

        return printable("\n".join(out))  # names from a model cannot drive the terminal of who reads it

    def html(self) -> str:
        """The Markdown rendered (markdown-it-py), images by their relative paths."""
        return markdown_to_html(self.markdown(), self.title)

    def write(self, out_dir: Path, stem: str = "report") -> Path:
        md = out_dir / f"{stem}.md"
        md.write_text(self.markdown())
        (out_dir / f"{stem}.html").write_text(self.html())
        return md
