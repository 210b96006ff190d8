"""The ``placer`` command: a table of thin commands over the public API.

User errors (:class:`placer.errors.PlacerError`) print one line and exit 2; anything else is a bug
and keeps its traceback. Each command is a function ``cmd_NAME(args) -> int`` plus a parser
builder ``add_NAME(subparsers)``; ``COMMANDS`` lists them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from placer.errors import PlacerError


def parse_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", ...]`` -> ``{"x": (1, 3, 224, 224)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise PlacerError(f"--shape {item!r}: expected NAME=D1xD2x..., e.g. input=1x3x224x224") from None
    return shapes


def parse_targets(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


# ---- devices ---------------------------------------------------------------------------------
def add_devices(sub) -> None:
    p = sub.add_parser("devices", help="list the targets this machine has, with versions")
    p.set_defaults(func=cmd_devices)


def cmd_devices(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from placer.devices import available_targets

    table = Table(title="placer targets on this machine")
    for col in ("kind", "name", "available", "version / reason"):
        table.add_column(col)
    for row in available_targets():
        table.add_row(row["kind"], row["name"], "yes" if row["available"] else "no", row["version"])
    Console().print(table)
    return 0


# ---- command table (helpers add their add_/cmd_ pairs above and list them here) ----------------
COMMANDS: list[Callable] = [add_devices]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="placer", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PlacerError as exc:
        print(f"placer {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"placer {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
