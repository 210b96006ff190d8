"""Numerics: compare a plan's outputs with the whole model in ONNX Runtime on the same inputs.

Tolerance (per output, elementwise; defaults ``rtol=1e-3``, ``atol=1e-4``)::

    scale    = max |ref|                      (over the reference's finite elements)
    atol_eff = atol * max(scale, tiny)        (tiny: the smallest normal number of the output dtype)
    pass     iff  |out - ref| <= atol_eff + rtol * |ref|

i.e. ``atol`` is relative to the output's magnitude, not an absolute number: a logit tensor whose
largest element is 30 gets 3e-3, a softmax output with max 0.5 gets 5e-5, and an output of size
~1e-21 gets ~1e-25, so a plan that computes it 2x wrong fails (an absolute 1e-4 would pass any
answer there). ``rtol`` covers the large elements. Integer and bool outputs must be equal. NaN
matches NaN, and +-inf matches the same infinity. ``max_rel`` in the report is
``max |out-ref| / max(|ref|, atol_eff, tiny)`` (bounded where ref is ~0; never a division by zero,
so ``atol=0`` is allowed and means "within rtol"). Per-output overrides:
``tolerances={name: (rtol, atol)}``.

A degenerate reference makes the check prove little: near-zero (``max |ref| < 1e-12``, or no finite
element) or near-constant (``std(ref) <= 1e-6 * max |ref|`` over 2 or more elements, e.g. a
saturated sigmoid). :func:`compare` then warns (:class:`DegenerateReferenceWarning`) and sets
:attr:`OutputCheck.degenerate`; the check itself is still made.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from placer.devices import make_target
from placer.errors import PlacerError
from placer.graph.inputs import random_inputs as model_random_inputs
from placer.run.npz_inputs import read_npz

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-4
#: (rtol, atol) per plan precision; atol is relative to max |reference| (module docstring). bf16
#: keeps 8 significant bits: its rtol is torch.testing's for bf16 (1.6e-2), its atol 1 % of the
#: output's range (OpenVINO's bf16 squeezenet: 0.1 % of max |ref|, 4 of 1000 elements past 1e-3).
TOLERANCES = {"f32": (DEFAULT_RTOL, DEFAULT_ATOL), "bf16": (1.6e-2, 1e-2)}


def tolerance_for(precision: str) -> tuple[float, float]:
    """``(rtol, atol)`` for plans computed at ``precision`` (``f32`` or ``bf16``)."""
    if precision not in TOLERANCES:
        raise PlacerError(f"unknown precision {precision!r}; choose one of {', '.join(TOLERANCES)}")
    return TOLERANCES[precision]
#: below this max |ref| a float reference output counts as near-zero
NEAR_ZERO = 1e-12
#: std(ref) at most this times max |ref| counts as near-constant
NEAR_CONSTANT = 1e-6


class DegenerateReferenceWarning(UserWarning):
    """The reference output is near-zero or near-constant: matching it says little about the plan."""


@dataclass(frozen=True)
class OutputCheck:
    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs: float
    max_rel: float
    atol_eff: float
    rtol: float
    ref_max_abs: float
    passed: bool
    reason: str = ""
    #: "" or why the reference output is degenerate ("near-zero ...", "near-constant ...")
    degenerate: str = ""


@dataclass(frozen=True)
class NumericsReport:
    outputs: tuple[OutputCheck, ...]
    n_requests: int = 1

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def failures(self) -> list[OutputCheck]:
        return [o for o in self.outputs if not o.passed]

    @property
    def degenerate(self) -> list[OutputCheck]:
        """Outputs whose reference was near-zero or near-constant (the check proves little for them)."""
        return [o for o in self.outputs if o.degenerate]

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "n_requests": self.n_requests,
                "degenerate": [o.name for o in self.degenerate],
                "outputs": [dict(asdict(o), shape=list(o.shape)) for o in self.outputs]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    def summary(self) -> str:
        lines = [f"numerics vs onnxruntime (whole model, {self.n_requests} request(s)): "
                 f"{'PASS' if self.passed else 'FAIL'}"]
        for o in self.outputs:
            lines.append(
                f"  {o.name}: max abs {o.max_abs:.3g} (tol {o.atol_eff:.3g} + {o.rtol:g}|ref|), "
                f"max rel {o.max_rel:.3g}"
                f"  {'ok' if o.passed else 'MISMATCH'}{(' - ' + o.reason) if o.reason else ''}"
                + (f"  [reference {o.degenerate}: the check proves little]" if o.degenerate else "")
            )
        return "\n".join(lines)

    def merge(self, other: "NumericsReport") -> "NumericsReport":
        """Worst case per output over two reports (for many requests)."""
        by = {o.name: o for o in self.outputs}
        merged = []
        for o in other.outputs:
            a = by.get(o.name)
            if a is None:
                merged.append(o)
                continue
            a_worse = (not a.passed and o.passed) or (a.passed == o.passed and a.max_abs >= o.max_abs)
            worst = a if a_worse else o
            merged.append(OutputCheck(
                worst.name, worst.shape, worst.dtype, max(a.max_abs, o.max_abs), max(a.max_rel, o.max_rel),
                worst.atol_eff, worst.rtol, max(a.ref_max_abs, o.ref_max_abs), a.passed and o.passed,
                worst.reason or a.reason or o.reason, a.degenerate or o.degenerate))
        return NumericsReport(tuple(merged), self.n_requests + other.n_requests)


def compare(
    outputs: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    *,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    tolerances: Mapping[str, tuple[float, float]] | None = None,
) -> NumericsReport:
    """Compare outputs with reference outputs by name (see the module docstring)."""
    checks = []
    for name, ref in reference.items():
        ref = np.asarray(ref)
        r_tol, a_tol = (tolerances or {}).get(name, (rtol, atol))
        if name not in outputs:
            checks.append(_failed(name, ref, r_tol, a_tol, "missing from the plan's outputs"))
            continue
        out = np.asarray(outputs[name])
        if out.shape != ref.shape:
            why = f"shape {list(out.shape)} != reference {list(ref.shape)}"
            checks.append(_failed(name, ref, r_tol, a_tol, why))
            continue
        if ref.dtype.kind in "biu" or ref.dtype == np.bool_:
            diff = np.abs(out.astype(np.int64) - ref.astype(np.int64)) if ref.size else np.zeros(0)
            mx = float(diff.max()) if diff.size else 0.0
            checks.append(OutputCheck(name, tuple(ref.shape), str(ref.dtype), mx, mx, 0.0, 0.0,
                                      float(np.abs(ref).max()) if ref.size else 0.0, mx == 0.0,
                                      "" if mx == 0 else "integer output differs"))
            continue
        checks.append(_compare_float(name, out, ref, r_tol, a_tol))
    return NumericsReport(tuple(checks))


def _compare_float(name: str, out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> OutputCheck:
    """One float output (module docstring): no division by zero, no invalid-value warnings."""
    tiny = float(np.finfo(ref.dtype).tiny) if ref.dtype.kind == "f" else float(np.finfo(np.float64).tiny)
    o64, r64 = out.astype(np.float64), ref.astype(np.float64)
    same = (o64 == r64) | (np.isnan(o64) & np.isnan(r64))  # equal infinities and NaN/NaN match
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, replaced just below
        diff = np.where(same, 0.0, np.abs(o64 - r64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    finite = np.isfinite(r64)
    finite_ref = np.abs(np.where(finite, r64, 0.0))
    ref_max = float(finite_ref.max()) if finite_ref.size else 0.0
    atol_eff = atol * max(ref_max, tiny)
    ok = diff <= atol_eff + rtol * finite_ref
    mx = float(diff.max()) if diff.size else 0.0
    rel = float((diff / np.maximum(finite_ref, max(atol_eff, tiny))).max()) if diff.size else 0.0
    passed = bool(ok.all())
    reason = ""
    if not passed:
        reason = f"{int((~ok).sum())} of {ok.size} elements outside tolerance"
    degenerate = _degenerate(r64[finite], ref.size, ref_max)
    if degenerate:
        warnings.warn(f"numerics: the reference output {name!r} is {degenerate}: matching it proves little "
                      "about the plan (try other inputs: --inputs FILE.npz or another seed)",
                      DegenerateReferenceWarning, stacklevel=3)
    return OutputCheck(name, tuple(ref.shape), str(ref.dtype), mx, rel, atol_eff, rtol, ref_max, passed, reason,
                       degenerate)


def _degenerate(finite_values: np.ndarray, size: int, ref_max: float) -> str:
    """"" or why a float reference is degenerate (module docstring)."""
    if size == 0:
        return ""
    if finite_values.size == 0:
        return "near-zero (no finite element)"
    if ref_max < NEAR_ZERO:
        return f"near-zero (max |ref| < {NEAR_ZERO:g})"
    with np.errstate(over="ignore", invalid="ignore"):  # huge float64 values: std inf, not degenerate
        std = float(finite_values.std()) if finite_values.size >= 2 else math.inf
    if std <= NEAR_CONSTANT * ref_max:
        return f"near-constant (std <= {NEAR_CONSTANT:g} x max |ref|)"
    return ""


def _failed(name: str, ref: np.ndarray, rtol: float, atol: float, reason: str) -> OutputCheck:
    inf = float("inf")
    return OutputCheck(name, tuple(ref.shape), str(ref.dtype), inf, inf, atol, rtol, 0.0, False, reason)


class ReferenceRunner:
    """The whole model in ONNX Runtime (1 thread), built once, for reference outputs."""

    def __init__(self, model, threads: int = 1):
        self.compiled = make_target(f"onnxruntime:t{threads}").compile(model)
        self.output_names = self.compiled.output_names

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.compiled.run(feeds)


def check_against_reference(
    model,
    requests: Sequence[Mapping[str, np.ndarray]],
    outputs: Sequence[Mapping[str, np.ndarray] | None],
    *,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    tolerances: Mapping[str, tuple[float, float]] | None = None,
    reference: ReferenceRunner | None = None,
) -> NumericsReport:
    """Run the whole model in ONNX Runtime on each request's inputs and compare (worst case over requests).

    Requests whose ``outputs`` entry is None (failed) are skipped.
    """
    ref = reference or ReferenceRunner(model)
    report: NumericsReport | None = None
    for feeds, out in zip(requests, outputs):
        if out is None:
            continue
        r = compare(out, ref.run(feeds), rtol=rtol, atol=atol, tolerances=tolerances)
        report = r if report is None else report.merge(r)
    if report is None:
        raise PlacerError("numerics: no request produced outputs to check")
    return report


# ---- inputs -------------------------------------------------------------------------------------
def random_inputs(graph, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs for a model (an OpGraph): :func:`placer.graph.random_inputs` of its model."""
    return dict(model_random_inputs(graph.model, seed))


def load_inputs(spec: str, graph, n: int = 1) -> list[dict[str, np.ndarray]]:
    """``seed:N`` -> n requests with seeds N, N+1, ...; ``FILE.npz`` -> its arrays, repeated n times.

    An npz whose arrays have one more leading dimension than the inputs holds one request per row.
    """
    if spec.startswith("seed:"):
        try:
            seed = int(spec[5:])
        except ValueError:
            raise PlacerError(f"--inputs {spec!r}: expected seed:N with an integer N") from None
        if not 0 <= seed <= 2**32 - 1 - n:  # numpy seeds are unsigned; request i uses seed N + i
            raise PlacerError(f"--inputs {spec!r}: N must be between 0 and {2**32 - 1 - n}")
        return [random_inputs(graph, seed + i) for i in range(n)]
    path = Path(spec)
    if not path.is_file():
        raise PlacerError(f"--inputs {spec!r}: no such file (expected FILE.npz or seed:N)")
    names = [x if isinstance(x, str) else x.name for x in graph.inputs]
    wants = {}
    for k in names:
        try:
            want_dt = np.dtype(graph.tensors[k].dtype)
        except TypeError:  # a dtype numpy does not name (bfloat16 ...): the runtime checks it
            want_dt = None
        wants[k] = (tuple(int(d) for d in graph.tensors[k].shape), want_dt)
    # headers and sizes checked before any data is read; only the rows used are read
    arrays, batched = read_npz(path, spec, wants, n)
    if batched:
        rows = min(arrays[k].shape[0] for k in names)
        # np.array, not np.ascontiguousarray: the latter makes a row of a scalar input (a numpy scalar)
        # shape (1,), which every runtime refuses for a 0-d input
        reqs = [{k: np.array(arrays[k][i], order="C") for k in names} for i in range(rows)]
    else:
        reqs = [{k: arrays[k] for k in names}]
    given = len(reqs)
    while given and len(reqs) < n:  # the file's rows in turn: A B A B A for two rows and five requests
        reqs.append(reqs[len(reqs) % given])
    return reqs[: max(n, 1)] if n else reqs
