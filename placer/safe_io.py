"""Reading files a user hands to placer, safely, and printing what came from them.

Every JSON file placer reads (problem JSON, a plan directory's plan.json / stage_config.json /
compiled.json, a cost model's card and tables, a tune directory's tune.json / trials.json) goes
through :func:`load_json`, and every JSON text read from elsewhere (a store's columns) through
:func:`loads`:

* only a regular file is opened (:func:`check_regular_file`: a directory, FIFO, device or socket
  is refused from ``os.stat`` before any ``open``, so a FIFO cannot block and ``/dev/zero`` cannot
  fill memory), opened non-blocking and checked again on the open descriptor;
* a file over :func:`max_json_bytes` (64 MiB; ``$PLACER_MAX_JSON_MB``) is refused before reading;
* a key repeated in one object is refused (the last value would silently win: a dropped pin);
* an integer of more than 19 digits and a number that overflows to infinity (``1e999``) are
  refused while parsing (``NaN`` / ``Infinity`` spelled out stay, for the loaders to judge);
* nesting deeper than :data:`MAX_DEPTH` levels is refused (``RecursionError`` from the parser on
  very deep input is turned into the same error).

Every refusal is the caller's :class:`~placer.errors.PlacerError` subclass, naming the file.
:func:`printable` escapes control characters (terminal escape sequences) in text that came from a
file before it is printed.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from typing import Any

from placer.errors import PlacerError

__all__ = ["MAX_DEPTH", "check_regular_file", "load_json", "loads", "max_json_bytes", "printable",
           "read_bytes"]

#: deepest nesting of arrays / objects accepted in a JSON file
MAX_DEPTH = 100
#: integers with more digits than this are refused (int64 has 19)
MAX_INT_DIGITS = 19
#: default size limit of a JSON file, MiB (``$PLACER_MAX_JSON_MB`` overrides it)
DEFAULT_MAX_JSON_MB = 64
MAX_JSON_ENV = "PLACER_MAX_JSON_MB"


def max_json_bytes() -> int:
    """The size limit of a JSON file: ``$PLACER_MAX_JSON_MB`` MiB if set to a positive number, else 64 MiB."""
    env = os.environ.get(MAX_JSON_ENV, "")
    try:
        mb = float(env) if env else DEFAULT_MAX_JSON_MB
    except ValueError:
        mb = DEFAULT_MAX_JSON_MB
    if not (math.isfinite(mb) and mb > 0):
        mb = DEFAULT_MAX_JSON_MB
    return int(mb * 2**20)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular_file(path: str | os.PathLike, what: str, error: type[PlacerError] = PlacerError,
                       max_bytes: int | None = None) -> os.stat_result:
    """``os.stat(path)`` if it is a regular file of at most ``max_bytes``; else ``error`` naming it.
    Nothing is opened, so a FIFO or a device is refused without blocking."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: cannot read {what} (no such file)") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or type(exc).__name__})") from None
    except ValueError:  # an embedded NUL
        raise error(f"{path!r}: cannot read {what} (not a valid path)") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: cannot read {what}: it is {_kind(st.st_mode)}, not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(f"{path}: {what} is {st.st_size} bytes, over the limit of {max_bytes} bytes "
                    f"(${MAX_JSON_ENV} raises it)")
    return st


def read_bytes(path: str | os.PathLike, what: str, error: type[PlacerError] = PlacerError,
               max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file (see :func:`check_regular_file`), opened non-blocking and checked
    again on the descriptor (a file swapped for a FIFO in between is refused, not waited on), and
    never more than ``max_bytes`` read (a file that grows meanwhile is refused)."""
    check_regular_file(path, what, error, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or type(exc).__name__})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: cannot read {what}: it is {_kind(st.st_mode)}, not a regular file")
        limit = max_bytes if max_bytes is not None else st.st_size
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    if max_bytes is not None and got > max_bytes:
        raise error(f"{path}: {what} is over the limit of {max_bytes} bytes (${MAX_JSON_ENV} raises it)")
    return b"".join(chunks)


class _Refused(ValueError):
    """Raised inside the JSON parser's hooks (a repeated key, a number out of range)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"the key {_short(k)} appears twice in one object (refusing an ambiguous file)")
        out[k] = v
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"the integer {text[:24]}... ({len(text.lstrip('-'))} digits) is out of range")
    return int(text)


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _Refused(f"the number {text[:40]} is out of range (it overflows to infinity)")
    return v


def _depth_ok(data: Any, max_depth: int) -> bool:
    """No dict or list nested deeper than ``max_depth`` (the top one is at depth 1); level by level."""
    level = [data] if isinstance(data, (dict, list)) else []
    depth = 1
    while level:
        if depth > max_depth:
            return False
        below: list[Any] = []
        for x in level:
            below += [v for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (dict, list))]
        level = below
        depth += 1
    return True


def loads(text: str | bytes, where: str, error: type[PlacerError] = PlacerError, *,
          max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON ``text`` (from ``where``, named in errors) with the rules of the module docstring."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise error(f"{where}: invalid JSON (not UTF-8 text)") from None
    if not isinstance(text, str):
        raise error(f"{where}: invalid JSON (expected text, got {type(text).__name__})")
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise error(f"{where}: nested more than {max_depth} levels deep; refusing it") from None
    except _Refused as exc:
        raise error(f"{where}: {exc}") from None
    except ValueError as exc:  # JSONDecodeError
        raise error(f"{where}: invalid JSON ({exc})") from None
    if not _depth_ok(data, max_depth):
        raise error(f"{where}: nested more than {max_depth} levels deep; refusing it")
    return data


def load_json(path: str | os.PathLike, what: str, error: type[PlacerError] = PlacerError, *,
              max_bytes: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """Read and parse the JSON file ``path`` (``what`` it is, for messages) safely; see the module
    docstring. ``max_bytes`` defaults to :func:`max_json_bytes`."""
    raw = read_bytes(path, what, error, max_json_bytes() if max_bytes is None else max_bytes)
    return loads(raw, f"{path}", error, max_depth=max_depth)


# ---- printing what came from a file ------------------------------------------------------------
# C0 and C1 controls, DEL, and the Unicode line separators / bidirectional overrides (which can make
# text read differently from what it is); newline and tab are kept where asked
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: Any, *, newlines: bool = True) -> str:
    """``str(text)`` with every control character (ESC and the rest of C0/C1, DEL, bidi overrides)
    written as an escape such as ``\\x1b``, so text from a file cannot move the cursor, clear the
    screen or fake output. ``newlines=False`` escapes newlines and tabs too (a one-line message)."""
    s = str(text)
    return (_CONTROL if newlines else _CONTROL_NL).sub(_escape, s)


def _short(s: str, n: int = 60) -> str:
    r = repr(s)
    return printable(r if len(r) <= n else r[: n - 4] + "...'", newlines=False)
