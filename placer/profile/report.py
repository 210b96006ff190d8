"""Summary tables for profiling campaigns (what ``placer profile`` prints)."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence

from placer.devices import make_targets
from placer.errors import ProfileError
from placer.profile.campaign import CampaignResult, profile_model
from placer.profile.drift import session_factors
from placer.profile.engine import SLOW_FIRST_WINDOW
from placer.profile.store import open_store
from placer.safe_io import printable


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3f}"


def summary_table(graph, res: CampaignResult, title: str | None = None):
    """A rich Table: one row per target (signatures measured/cached/unsupported/failed, op time)."""
    from rich.markup import escape
    from rich.table import Table

    title = title or f"{graph.name}: {len(graph.ops)} ops, {res.unique_signatures} unique signatures"
    t = Table(title=escape(printable(title)))
    segs = any(k == "segment" for tot in res.per_target.values() for (k, _o) in tot.counts)
    cols = ["target", "measured", "cached", "unsupported", "failed", "ops unsupp.", "sum op ms (net)",
            "overhead us", "whole model ms", "wall s"] + (["segments meas./cached"] if segs else [])
    for col in cols:
        t.add_column(col, justify="left" if col == "target" else "right", no_wrap=col == "target")
    for name, tot in res.per_target.items():
        row = [
            name, str(tot.n("measured")), str(tot.n("cached")), str(tot.n("unsupported")), str(tot.n("failed")),
            f"{tot.ops_unsupported}/{len(graph.ops)}", _ms(tot.op_ms),
            "-" if tot.overhead_ms is None else f"{tot.overhead_ms * 1e3:.1f}", _ms(tot.whole_model_ms),
            f"{tot.wall_s:.1f}",
        ]
        if segs:
            row.append(f"{tot.n('measured', 'segment')}/{tot.n('cached', 'segment')}")
        t.add_row(*row)
    return t


def console():
    """stdout console; wide when not a terminal (so piped tables keep full target names)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)


def second_window_line(res: CampaignResult) -> str:
    """What the second measurement windows found."""
    steady = (f"; {res.steady} one-thread measurement(s) kept at one window (the target's second windows "
              "had mostly agreed with the first)" if res.steady else "")
    due = (f"; {res.windows_due} of the rows were stored by an earlier run whose budget had left their "
           "second window out" if res.windows_due else "")
    return (f"second window: {res.second_windows} measurement(s) taken again later in a fresh worker, "
            f"the lower median kept; the first window was over {SLOW_FIRST_WINDOW:g}x slower for "
            f"{res.slow_first_windows}{steady}{due}")


def futile_line(res: CampaignResult) -> str:
    """What :attr:`CampaignResult.futile` means, in one line."""
    return (f"measurement conditions: re-takes stopped escaping the disturbance (the host's slow spells "
            f"outlast them), so {res.futile} disturbed measurement(s) were kept at their first attempt "
            "(flagged; measured again next time)")


def summary_lines(res: CampaignResult) -> list[str]:
    lines = [
        f"measurements: {res.measured} measured, {res.cached} cached, {res.unsupported} unsupported, "
        f"{res.failed} failed; links: {res.links_measured} measured, {res.links_cached} cached; "
        f"wall {res.wall_s:.1f} s; store {res.store_path}"
    ]
    if res.remeasured or res.contended:
        lines.append(
            f"measurement conditions: other processes kept the machine busy, or the host slowed a core, during "
            f"{res.remeasured} measurement(s), taken again; {res.contended} stayed disturbed in every attempt and "
            "are flagged in the store "
            "(`placer profile --retry-contended` measures them again)")
    if res.futile:
        lines.append(futile_line(res))
    if res.second_windows:
        lines.append(second_window_line(res))
    lines += [f"warning: {p}" for p in res.problems]
    return lines


#: longest --timeout of one measurement, seconds
MAX_TIMEOUT_S = 86400.0


def profile_command(model: str, *, targets: Sequence[str] | None, db: str | None, shapes: Mapping | None,
                    timeout_s: float, segments: int, links: bool, whole_model: bool, retry_failed: bool,
                    progress: bool, retry_contended: bool = False, probes: int | None = None) -> int:
    """``placer profile``: validate targets and store first (fast errors), then load and profile."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ProfileError(f"--timeout {timeout_s}: must be > 0 and at most {MAX_TIMEOUT_S:g} s (a day)")
    if segments and segments < 2:
        raise ProfileError(f"--segments {segments}: the longest chain segment must be >= 2 ops")
    tlist = make_targets(targets)
    store, _ = open_store(db)
    with store:
        graph, res = profile_model(model, tlist, store, shapes=shapes or None, segments=segments or False,
                                   timeout_s=timeout_s, links=links, whole_model=whole_model,
                                   retry_failed=retry_failed, progress=progress,
                                   retry_contended=retry_contended, probes=probes)
        drift = drift_line(store, tlist, res) if res.probes else None
    out = console()
    out.print(summary_table(graph, res))
    for line in summary_lines(res) + ([drift] if drift else []):
        out.print(printable(line), highlight=False, markup=False)
    unusable, unsupported = unusable_targets(res, tlist)
    for name, why in unsupported.items():
        out.print(printable(f"note: {name} supports none of the {res.unique_signatures} op signature(s) of "
                            f"{graph.name} ({why}): plans leave it out"), highlight=False, markup=False)
    if unusable:
        for name, why in unusable.items():
            print(printable(f"placer profile: error: {name} ran none of the {res.unique_signatures} op "
                            f"signature(s) of {graph.name} ({why}): a plan cannot place anything there"),
                  file=sys.stderr)
        return 1
    return 0


def _names(text: str, name: str) -> bool:
    """Whether ``text`` names the target ``name`` as a whole (``onnxruntime@cpu:t1``, not ``...:t12``)."""
    return re.search(rf"(?<![\w@:.-]){re.escape(name)}(?![\w@.-]|:\w)", text) is not None


def unusable_targets(res: CampaignResult, targets: Sequence) -> tuple[dict[str, str], dict[str, str]]:
    """Targets (simulated ones aside) with no op of the model measured ok, in this campaign or stored by
    an earlier one, as two maps of target name -> why:

    - unusable: the target is unavailable, its worker never started, or no op ran and at least one
      failed there (an error, a crash, a timeout): ``placer profile`` exits 1 for them;
    - unsupported: every op is unsupported there (declared, or refused by its compiler), a fact about
      the target that the campaign measured: a note, and the exit status stays 0.

    A target failing on some ops only has them marked unsupported there (the campaign goes on)."""
    ok: set[str] = set()
    failed: dict[str, str] = {}
    refused: dict[str, str] = {}
    for (_key, name), m in res.results.items():
        if m.kind != "op":
            continue
        why = f"{m.status}: {m.reason.splitlines()[0][:200]}" if m.reason else m.status
        if m.ok:
            ok.add(name)
        elif m.status == "unsupported":
            refused.setdefault(name, why)
        else:
            failed.setdefault(name, why)
    unusable, unsupported = {}, {}
    for t in targets:
        if getattr(t, "simulated", False) or t.name in ok:
            continue
        if t.name in failed:
            unusable[t.name] = failed[t.name]
        elif t.name in refused:
            unsupported[t.name] = refused[t.name]
        else:
            said = next((p for p in res.problems if _names(p, t.name)), None)
            unusable[t.name] = said.splitlines()[0][:200] if said else "no op measured"
    return unusable, unsupported


def drift_line(store, targets, res: CampaignResult) -> str:
    """What the probes of ``res`` say: how fast each target ran in this session against the store's
    reference session (:mod:`placer.profile.drift`)."""
    parts = []
    for t in targets:
        f = session_factors(store, t).get(res.session)
        if f is not None:
            parts.append(f"{t.name} {f:.3f}x")
    told = ("; time against the store's reference session (training data is divided by it): "
            + ", ".join(parts) if parts else "")
    fresh = (f"; {res.refreshed} stored row(s) a probe contradicted beyond noise measured again and replaced"
             if res.refreshed else "")
    return f"session {res.session}: {res.probes} probe measurement(s){told}{fresh}"


def link_table(link_model, targets: Iterable[str]):
    from rich.table import Table

    t = Table(title="links (hand-off incl. destination call cost)")
    for col in ("src", "dst", "latency us", "us per MB", "1 MB us", "16 MB us"):
        t.add_column(col)
    for (a, b), f in sorted(link_model.fits.items()):
        t.add_row(a, b, f"{f.latency_ms * 1e3:.1f}", f"{f.ms_per_byte * 1e9:.2f}",
                  f"{f.transfer_ms(1 << 20) * 1e3:.1f}", f"{f.transfer_ms(16 << 20) * 1e3:.1f}")
    return t
