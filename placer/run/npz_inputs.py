"""Reading ``--inputs FILE.npz`` within what the model's inputs need.

:func:`read_npz` opens the archive with :mod:`zipfile` (never ``np.load``), and for each model input
reads its member's ``.npy`` header first: the declared dtype, shape and order, and the zip entry's
declared size, are checked against the input (one request: the input's shape; a batch: one more
leading dimension) before any data is read. Only the rows the run uses are read, so a small archive
declaring gigabytes (a zip bomb, or a header declaring a huge shape) costs what the model's inputs
cost, not what the file claims. Members that are not model inputs are never read. Object (pickled)
arrays are refused from the header. Every refusal is a :class:`~placer.errors.PlacerError` naming the
file and the input.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Mapping

import numpy as np

from placer.errors import PlacerError
from placer.safe_io import check_regular_file

__all__ = ["MAX_HEADER_BYTES", "read_npz"]

#: the longest .npy header accepted (numpy writes at most a few hundred bytes)
MAX_HEADER_BYTES = 65536


def _header(f, where: str) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, header bytes) of the .npy stream ``f``, read without its data."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f, max_header_size=MAX_HEADER_BYTES)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(f, max_header_size=MAX_HEADER_BYTES)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except PlacerError:
        raise
    except Exception as exc:  # noqa: BLE001 - not .npy, a header too long, a malformed dict
        raise PlacerError(f"{where}: not a readable .npy array ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    header_len = 6 + 2 + (2 if version == (1, 0) else 4)
    return dtype, tuple(int(d) for d in shape), bool(fortran), header_len


def _read_exact(f, nbytes: int, where: str) -> bytes:
    chunks, got = [], 0
    while got < nbytes:
        try:
            chunk = f.read(min(1 << 24, nbytes - got))
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:  # CRC, inflate, bz2/lzma data
            raise PlacerError(f"{where}: the archive's data is damaged ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
        if not chunk:
            raise PlacerError(f"{where}: the array is truncated ({got} of {nbytes} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_npz(path: str | os.PathLike, spec: str, wants: Mapping[str, tuple[tuple[int, ...], np.dtype | None]],
             requests: int) -> tuple[dict[str, np.ndarray], bool]:
    """The arrays of ``path`` for the inputs ``wants`` (name -> (shape, dtype or None if numpy has no
    name for it)), and whether they are batched (one more leading dim, one request per row). At most
    ``max(requests, 1)`` rows are read. ``spec`` is how the user named the file (for messages)."""
    check_regular_file(path, "--inputs", PlacerError)
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        try:
            with open(path, "rb") as f:
                magic = f.read(6)
        except OSError:
            magic = b""
        if magic == b"\x93NUMPY":
            raise PlacerError(f"--inputs {spec}: a single .npy array; expected an .npz with one array per "
                              "input") from None
        raise PlacerError(f"--inputs {spec}: not a readable .npz of plain arrays (not a zip "
                          "archive)") from None
    except OSError as exc:
        raise PlacerError(f"--inputs {spec}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    with zf:
        members = {}
        for info in zf.infolist():
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            members.setdefault(key, info)
        missing = [k for k in wants if k not in members]
        if missing:
            raise PlacerError(f"--inputs {spec}: no array for model input(s) {missing} "
                              f"(has {sorted(members)})")
        heads = {}
        for k, info in members.items():
            if k not in wants:
                continue
            where = f"--inputs {spec}: {k!r}"
            try:
                f = zf.open(info)
            except Exception as exc:  # noqa: BLE001 - encrypted, unsupported compression
                raise PlacerError(f"{where}: cannot open the member ({type(exc).__name__}: {exc})") from None
            dtype, shape, fortran, hlen = _header(f, where)
            heads[k] = (f, dtype, shape, fortran, hlen, info)
        try:
            return _read_members(heads, spec, wants, requests)
        finally:
            for f, *_ in heads.values():
                f.close()


def _read_members(heads, spec, wants, requests):
    want_rows = max(int(requests), 1)
    batched = all(len(heads[k][2]) == len(wants[k][0]) + 1 for k in wants) and bool(wants)
    out: dict[str, np.ndarray] = {}
    for k, (f, dtype, shape, fortran, _hlen, info) in heads.items():
        where = f"--inputs {spec}: {k!r}"
        want_shape, want_dt = wants[k]
        if dtype.hasobject:
            raise PlacerError(f"{where} is an object array (pickled Python objects); refusing to load it")
        if want_dt is not None and dtype != want_dt:
            raise PlacerError(f"{where} has dtype {dtype}, the model wants {want_dt}")
        if batched:
            if tuple(shape[1:]) != tuple(want_shape):
                raise PlacerError(f"{where} has shape {list(shape)}, the model wants {list(want_shape)} "
                                  f"(or [requests, {', '.join(map(str, want_shape))}])")
            if shape[0] == 0:
                raise PlacerError(f"--inputs {spec}: the arrays hold 0 requests (leading dim 0)")
        elif tuple(shape) != tuple(want_shape):
            raise PlacerError(f"{where} has shape {list(shape)}, the model wants {list(want_shape)}")
        declared = math.prod(shape) * dtype.itemsize
        if info.file_size < declared:
            raise PlacerError(f"{where}: the archive entry holds {info.file_size} bytes, its header declares "
                              f"{declared} (truncated or forged)")
        rows = min(shape[0], want_rows) if batched else 1
        row_shape = tuple(shape[1:]) if batched else tuple(shape)
        if fortran and batched and rows < shape[0]:
            raise PlacerError(f"{where}: a Fortran-ordered batch of {shape[0]} requests where {rows} are "
                              "used; save it in C order (np.ascontiguousarray) or with fewer rows")
        if fortran:
            data = _read_exact(f, declared, where)
            arr = np.frombuffer(data, dtype=dtype).reshape(shape[::-1]).transpose()
        else:
            nbytes = rows * math.prod(row_shape) * dtype.itemsize
            arr = np.frombuffer(_read_exact(f, nbytes, where), dtype=dtype)
            arr = arr.reshape(((rows,) if batched else ()) + row_shape)
        out[k] = np.array(arr)  # writable, owns its memory
    return out, batched
