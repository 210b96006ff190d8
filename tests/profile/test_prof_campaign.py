"""Real campaigns: squeezenet on the framework runtimes, a small model on all three targets, links, segments,
whole models."""

from __future__ import annotations

import math

import pytest
from _profhelpers import THREE

from placer.profile import (
    OVERHEAD_KEY,
    ProfileStore,
    profile_graph,
    profile_segment,
    profile_whole_model,
    segment_key,
)
from placer.profile.keys import chain_segments

pytestmark = pytest.mark.slow


#: squeezenet on the two framework runtimes; TVM compiles every signature (about 1.2 s each on this CPU), so
#: it is profiled on the tiny model, with the links between all three targets
SQUEEZE = ["onnxruntime", "openvino"]


@pytest.fixture(scope="module")
def squeeze_store(tmp_path_factory, squeezenet, fast_timing):
    db = tmp_path_factory.mktemp("sq") / "squeezenet.db"
    res = profile_graph(squeezenet, SQUEEZE, db, progress=False, links=False, whole_model=False,
                        timing=fast_timing, timeout_s=120)
    return db, res


@pytest.fixture(scope="module")
def three_store(tmp_path_factory, tiny, fast_timing):
    db = tmp_path_factory.mktemp("three") / "tiny.db"
    # two link sizes (1 KiB, 1 MiB) instead of six: the fit and every pair are tested, in a third of the time
    res = profile_graph(tiny, THREE, db, progress=False, links=True, whole_model=False, timing=fast_timing,
                        timeout_s=120, link_sizes=(1 << 10, 1 << 20))
    return db, res


@pytest.mark.parametrize("case", ["squeezenet", "tiny"])
def test_every_op_measured_or_unsupported(case, request):
    db, res = request.getfixturevalue("squeeze_store" if case == "squeezenet" else "three_store")
    graph = request.getfixturevalue(case)
    targets = SQUEEZE if case == "squeezenet" else THREE
    n_sigs = len(graph.unique_signatures())
    assert res.unique_signatures == n_sigs
    n_t = len(targets)
    assert res.measured + res.unsupported + res.failed == n_t * (n_sigs + 1)  # + one overhead per target
    assert res.failed == 0, res.problems
    with ProfileStore(db) as st:
        for t in targets:
            ov = st.get(OVERHEAD_KEY, t)
            assert ov.ok and ov.kind == "overhead" and 0 < ov.median_ms < 1.0  # stored apart, < 1 ms
            for h, (sig, ids) in graph.unique_signatures().items():
                m = st.get(h, t)
                assert m is not None, (t, sig.op_type)
                if m.ok:
                    assert m.median_ms > 0 and m.n >= 3 and m.p10_ms <= m.median_ms <= m.p90_ms
                    assert m.net_ms == pytest.approx(max(m.median_ms - ov.median_ms, 0.0))
                else:
                    assert m.status == "unsupported" and m.reason
        costs = st.op_costs(graph, targets)
        assert len(costs) == len(graph.ops) * n_t
        # every op runs somewhere; ORT runs everything
        for op in graph.ops:
            assert not math.isinf(costs[(op.id, "onnxruntime@cpu:t1")])
        rows = st.measurements(kind="op")
        assert len(rows) == n_t * n_sigs and all(r["signature"] for r in rows)
        assert st.integrity_check() == "ok"


def test_rerun_measures_nothing(three_store, tiny, fast_timing):
    db, _ = three_store
    res = profile_graph(tiny, THREE, db, progress=False, links=True, whole_model=False, timing=fast_timing,
                        link_sizes=(1 << 10, 1 << 20))
    assert res.measured == 0 and res.links_measured == 0
    assert res.cached == 3 * (len(tiny.unique_signatures()) + 1)


def test_links_each_pair(three_store):
    db, _ = three_store
    with ProfileStore(db) as st:
        lm = st.link_model(THREE)
        names = [f"{k}@cpu:t1" for k in THREE]
        assert len(lm.fits) == 6
        for a in names:
            assert lm.transfer_ms(10**6, a, a) == 0.0
            for b in names:
                if a == b:
                    continue
                f = lm.fit(a, b)
                assert f.latency_ms > 0 and f.ms_per_byte >= 0, (a, b, f)
                sizes = [p["nbytes"] for p in f.points]
                assert sizes == [1 << 10, 1 << 20]  # the sizes the campaign was asked for
                vals = [lm.transfer_ms(n, a, b) for n in (0, 1 << 10, 1 << 20, 16 << 20)]
                assert vals == sorted(vals)  # monotone in bytes


def test_segment_and_whole_model(tmp_path, tiny, fast_timing):
    db = tmp_path / "p.db"
    segs = chain_segments(tiny, max_len=3)
    assert segs
    ids = segs[0]
    got = profile_segment(tiny, ids, ["onnxruntime", "openvino"], db, timing=fast_timing)
    assert set(got) == {"onnxruntime@cpu:t1", "openvino@cpu:t1"}
    key = segment_key(tiny, ids)
    for m in got.values():
        assert m.ok and m.kind == "segment" and m.key == key and m.median_ms > 0
    with ProfileStore(db) as st:
        sig = st.signature(key)
        assert sig["kind"] == "segment" and sig["signature"]["n_ops"] == len(ids)
        n = st.count()
    again = profile_segment(tiny, ids, ["onnxruntime", "openvino"], db, timing=fast_timing)
    assert {k: v.timestamp for k, v in again.items()} == {k: v.timestamp for k, v in got.items()}  # cached
    whole = profile_whole_model(tiny, ["onnxruntime"], db, timing=fast_timing)
    m = whole["onnxruntime@cpu:t1"]
    assert m.ok and m.kind == "model" and m.key == f"model:{tiny.model_hash}"
    with ProfileStore(db) as st:
        assert st.count() == n + 1


def test_a_whole_model_on_all_cores_keeps_the_mean_of_its_windows_on_one_core_the_lower(tmp_path, tiny,
                                                                                         fast_timing, monkeypatch):
    """On all cores the host's spells are part of what a request meets: the lower window priced every
    such whole model below the bench's rounds (session 50); one-thread rows keep the lower."""
    from placer.profile.engine import ONE_THREAD_WINDOWS_ENV

    monkeypatch.setenv(ONE_THREAD_WINDOWS_ENV, "1")  # one-thread rows take second windows too, as by default
    db = tmp_path / "w.db"
    whole = profile_whole_model(tiny, ["onnxruntime:t2", "onnxruntime"], db, timing=fast_timing)
    two, one = whole["onnxruntime@cpu:t2"], whole["onnxruntime@cpu:t1"]
    first, second = two.meta["windows_ms"]
    assert two.meta["windows_kept"] == "mean" and two.median_ms == pytest.approx((first + second) / 2)
    assert two.p10_ms <= two.median_ms <= two.p90_ms
    assert "windows_kept" not in one.meta and one.median_ms == _kept_window(one.meta)


def test_segment_key_is_structural(tiny):
    ids = [op.id for op in tiny.ops[:2]]
    assert segment_key(tiny, ids) == segment_key(tiny, list(reversed(ids)))
    assert segment_key(tiny, ids) != segment_key(tiny, [op.id for op in tiny.ops[:3]])
    assert segment_key(tiny, ids).startswith("seg:")


def _kept_index(meta: dict) -> int:
    """Which window (0 or 1) a row keeps of its two: the lower at one pace where both were timed with the
    host's pace (placer.profile.pace), else the lower as measured; the first on a tie."""
    first, second = meta["windows_ms"]
    if "windows_pace_ms" not in meta:
        return int(second < first)
    pace_first, pace_second = meta["windows_pace_ms"]
    return int(second / pace_second < first / pace_first)


def _kept_window(meta: dict) -> float:
    """The median of the window a row keeps."""
    return meta["windows_ms"][_kept_index(meta)]


def test_ops_get_a_second_window_and_keep_the_lower_median(tmp_path, tiny, fast_timing, monkeypatch):
    """Each op is measured again after the first pass, in a fresh worker, on a 2-thread target and on a
    1-thread one (fewer ops than its probation: all of them); the row keeps the lower of the two medians
    and records both: the lower at one pace, where the host's pace was timed beside both windows
    (placer.profile.pace), as the one-thread ONNX Runtime target times it."""
    from placer.profile.engine import ONE_THREAD_PROBATION, ONE_THREAD_WINDOWS_ENV
    from placer.profile.pace import PACE_ENV

    monkeypatch.setenv(PACE_ENV, "1")  # the pace beside each window, as by default (the suite turns it off)
    monkeypatch.delenv(ONE_THREAD_WINDOWS_ENV, raising=False)  # the suite leaves them out (conftest)
    db = tmp_path / "w.db"
    res = profile_graph(tiny, ["onnxruntime:t2", "onnxruntime"], db, progress=False, links=False,
                        whole_model=False, timing=fast_timing)
    n_sigs = len(tiny.unique_signatures())
    assert n_sigs <= ONE_THREAD_PROBATION
    assert res.failed == 0 and res.second_windows == 2 * n_sigs and res.steady == 0
    assert 0 <= res.slow_first_windows <= res.second_windows
    with ProfileStore(db) as st:
        for op in tiny.ops:
            for target in ("onnxruntime@cpu:t2", "onnxruntime@cpu:t1"):
                row = st.get(op.signature.hash, target)
                kept = _kept_index(row.meta)
                assert row.median_ms == row.meta["windows_ms"][kept] > 0
                if target.endswith(":t1"):  # the pace is timed beside one-thread measurements only
                    # by index: two windows can time the same median, each with its own pace
                    assert row.meta["pace_ms"] == row.meta["windows_pace_ms"][kept]
                else:
                    assert "pace_ms" not in row.meta and "windows_pace_ms" not in row.meta
    again = profile_graph(tiny, ["onnxruntime:t2"], db, progress=False, links=False, whole_model=False,
                          timing=fast_timing)
    assert again.measured == 0 and again.second_windows == 0  # stored rows are not measured again
    off = profile_graph(tiny, ["onnxruntime:t2"], tmp_path / "one.db", progress=False, links=False,
                        whole_model=False, timing=fast_timing, second_window=False)
    assert off.second_windows == 0 and off.measured == n_sigs + 1  # the ops and the call overhead


@pytest.mark.parametrize("disagree_tol, mode, env, taken", [(float("inf"), True, None, "2"),
                                                              (-1.0, True, None, "all"),
                                                              (float("inf"), "all", None, "all"),
                                                              (-1.0, True, "0", "none"),
                                                              (float("inf"), "all", "0", "all")])
def test_a_one_thread_target_keeps_taking_second_windows_only_while_they_disagree(
        tmp_path, tiny, fast_timing, monkeypatch, disagree_tol, mode, env, taken):
    """A one-thread target's second windows are on probation: once ``ONE_THREAD_PROBATION`` were taken
    and under a quarter of them disagreed with their first window by more than ``WINDOWS_DISAGREE``, its
    first windows stand (counted as ``steady``). Here the probation is two windows and the tolerance is
    set so that every window agrees (inf) or disagrees (-1): no timing decides. ``second_window="all"``
    takes them all whatever they say; ``$PLACER_ONE_THREAD_WINDOWS=0`` leaves out the probation."""
    from placer.profile import engine

    monkeypatch.setattr(engine, "ONE_THREAD_PROBATION", 2)
    monkeypatch.setattr(engine, "WINDOWS_DISAGREE", disagree_tol)
    if env is None:
        monkeypatch.delenv(engine.ONE_THREAD_WINDOWS_ENV, raising=False)
    else:
        monkeypatch.setenv(engine.ONE_THREAD_WINDOWS_ENV, env)
    n_sigs = len(tiny.unique_signatures())
    res = profile_graph(tiny, ["onnxruntime"], tmp_path / "p.db", progress=False, links=False,
                        whole_model=False, timing=fast_timing, second_window=mode)
    assert res.failed == 0 and n_sigs > 2
    expected = {"2": (2, n_sigs - 2), "all": (n_sigs, 0), "none": (0, 0)}[taken]
    assert (res.second_windows, res.steady) == expected
    rows = [m for m in res.results.values() if m.ok and m.kind == "op"]
    assert len(rows) == n_sigs and sum("windows_ms" in m.meta for m in rows) == res.second_windows


def test_the_hurry_point_is_checked_before_each_second_window(tmp_path, tiny, fast_timing, monkeypatch):
    """A campaign that reaches its hurry point in the middle of the second windows leaves the rest out
    (their first windows stand, counted as hurried), not only a batch that begins past it. The hurry
    point here is "two second windows taken": no wall clock decides."""
    from placer.profile.engine import Engine

    monkeypatch.setattr(Engine, "_hurried", lambda self: self.result.second_windows >= 2)
    n_sigs = len(tiny.unique_signatures())
    res = profile_graph(tiny, ["onnxruntime:t2"], tmp_path / "h.db", progress=False, links=False,
                        whole_model=False, timing=fast_timing)
    assert res.failed == 0 and n_sigs > 2
    assert res.second_windows == 2 and res.hurried >= n_sigs - 2
    rows = [m for m in res.results.values() if m.ok and m.kind == "op"]
    assert sum("windows_ms" in m.meta for m in rows) == 2 and len(rows) == n_sigs


def test_second_windows_a_hurry_point_left_out_are_taken_by_the_next_campaign(tmp_path, tiny, fast_timing,
                                                                              monkeypatch):
    """The rows whose second window the hurry point left out are marked due in the store; the next
    campaign on that store measures nothing again but takes those windows (the lower median kept,
    the mark cleared), and the one after takes none. The hurry point is "two second windows taken"."""
    from placer.profile.engine import Engine
    from placer.profile.store import WINDOW_DUE

    db, n_sigs = tmp_path / "d.db", len(tiny.unique_signatures())
    kw = dict(progress=False, links=False, whole_model=False, timing=fast_timing)
    with monkeypatch.context() as m:
        m.setattr(Engine, "_hurried", lambda self: self.result.second_windows >= 2)
        first = profile_graph(tiny, ["onnxruntime:t2"], db, **kw)
    with ProfileStore(db) as st:
        ops = [r for r in st.measurements(kind="op") if r["status"] == "ok"]
    due = {r["key"] for r in ops if r["meta"].get(WINDOW_DUE)}
    assert first.second_windows == 2 and len(ops) == n_sigs and len(due) == n_sigs - 2
    assert not any(r["meta"].get(WINDOW_DUE) and "windows_ms" in r["meta"] for r in ops)
    before = {r["key"]: r["median_ms"] for r in ops}
    then = profile_graph(tiny, ["onnxruntime:t2"], db, **kw)
    assert then.measured == 0 and then.windows_due == len(due) == then.second_windows
    assert then.hurried == 0
    rows = {k: m for (k, _), m in then.results.items() if m.kind == "op"}
    assert all(rows[k].meta["windows_ms"][0] == before[k] for k in due)
    assert all(rows[k].median_ms == _kept_window(rows[k].meta) for k in due)
    assert not any(m.meta.get(WINDOW_DUE) for m in rows.values())
    last = profile_graph(tiny, ["onnxruntime:t2"], db, **kw)
    assert last.measured == 0 and last.windows_due == 0 and last.second_windows == 0


def test_a_campaign_stopped_before_its_second_windows_leaves_them_due(tmp_path, tiny, fast_timing,
                                                                     monkeypatch):
    """A first window that will get a second one is stored due and the second window clears the mark:
    a campaign killed between them (the links run in between, minutes on a real model) left rows at
    one window for good, the next campaign reading them as done. Here the stop comes as the second
    windows begin; the next campaign measures nothing again and takes every one of them."""
    from placer.profile.engine import Engine

    db, n_sigs = tmp_path / "k.db", len(tiny.unique_signatures())
    kw = dict(progress=False, links=False, whole_model=False, timing=fast_timing)

    def killed(self):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(Engine, "run_second_windows", killed)
        with pytest.raises(KeyboardInterrupt):
            profile_graph(tiny, ["onnxruntime:t2"], db, **kw)
    assert len(_due_keys(db)) == n_sigs
    then = profile_graph(tiny, ["onnxruntime:t2"], db, **kw)
    assert then.measured == 0 and then.second_windows == then.windows_due == n_sigs
    assert not _due_keys(db)
    with ProfileStore(db) as st:
        assert all(len(r["meta"]["windows_ms"]) == 2 for r in st.measurements(kind="op", status="ok"))


def _due_keys(db) -> set[str]:
    from placer.profile.store import WINDOW_DUE

    with ProfileStore(db) as st:
        return {r["key"] for r in st.measurements(kind="op", status="ok") if r["meta"].get(WINDOW_DUE)}


def test_a_due_row_a_probe_refreshes_gets_one_second_window(tmp_path, tiny, fast_timing, monkeypatch):
    """A row marked due that the next campaign's probe contradicts is measured again (a fresh first
    window) and queued once more: it still gets one second window, not two, and is not counted as due.
    The probes' verdict is forced ("contradicted"), the hurry point is "no window taken"."""
    from placer.profile import engine

    db, kw = tmp_path / "r.db", dict(progress=False, links=False, whole_model=False, timing=fast_timing)
    with monkeypatch.context() as m:
        m.setattr(engine.Engine, "_hurried", lambda self: True)
        profile_graph(tiny, ["onnxruntime:t2"], db, **kw)
    due = _due_keys(db)
    assert len(due) == len(tiny.unique_signatures())
    monkeypatch.setattr(engine, "contradicts", lambda *a, **k: True)
    then = profile_graph(tiny, ["onnxruntime:t2"], db, probes=2, **kw)
    assert then.refreshed >= 1 and then.measured == then.refreshed
    assert then.second_windows == len(due) and then.windows_due == len(due) - then.refreshed
    assert not _due_keys(db)
    with ProfileStore(db) as st:
        ops = [r for r in st.measurements(kind="op", status="ok") if r["key"] in due]
    assert all(len(r["meta"]["windows_ms"]) == 2 and r["median_ms"] == _kept_window(r["meta"]) for r in ops)


def test_a_one_thread_probation_clears_the_marks_of_the_rows_it_leaves(tmp_path, tiny, fast_timing,
                                                                        monkeypatch):
    """A one-thread target whose probation stops (its windows agree: the tolerance is set so) leaves the
    rest of its due rows at one window and clears their marks: the campaign after takes none. The
    probation is two windows; the hurry point of the first campaign is "no window taken"."""
    from placer.profile import engine

    monkeypatch.delenv(engine.ONE_THREAD_WINDOWS_ENV, raising=False)  # the suite leaves them out (conftest)
    db, kw = tmp_path / "o.db", dict(progress=False, links=False, whole_model=False, timing=fast_timing)
    with monkeypatch.context() as m:
        m.setattr(engine.Engine, "_hurried", lambda self: True)
        profile_graph(tiny, ["onnxruntime"], db, **kw)
    n_sigs = len(tiny.unique_signatures())
    assert len(_due_keys(db)) == n_sigs > 2
    monkeypatch.setattr(engine, "ONE_THREAD_PROBATION", 2)
    monkeypatch.setattr(engine, "WINDOWS_DISAGREE", float("inf"))
    then = profile_graph(tiny, ["onnxruntime"], db, **kw)
    assert (then.second_windows, then.windows_due, then.steady) == (2, 2, n_sigs - 2)
    assert not _due_keys(db)
    last = profile_graph(tiny, ["onnxruntime"], db, **kw)
    assert last.second_windows == 0 and last.windows_due == 0


def test_the_links_come_before_the_second_windows_which_the_hurry_point_cuts(tmp_path, tiny, fast_timing,
                                                                              monkeypatch):
    """A plan needs the links; the second windows only refine rows it has. So a campaign measures its links
    first, and a hurry point reached meanwhile leaves the second windows out, not the links (the main
    job's profiling timed in session 36: 114 second windows, then 16 links of 19 s past the hurry
    point). The hurry point here is "a link measured": no wall clock decides."""
    from placer.profile.engine import Engine

    monkeypatch.setattr(Engine, "_hurried", lambda self: self.result.links_measured > 0)
    targets = ["onnxruntime:t2", "onnxruntime"]
    res = profile_graph(tiny, targets, tmp_path / "l.db", progress=False, whole_model=False,
                        timing=fast_timing, link_sizes=(1 << 10,))
    n_sigs = len(tiny.unique_signatures())
    assert res.failed == 0 and res.links_measured == len(targets) ** 2  # both ways, and a cut on each
    assert res.second_windows == 0 and res.hurried >= n_sigs
    with ProfileStore(tmp_path / "l.db") as st:
        assert st.has_link("onnxruntime@cpu:t2", "onnxruntime@cpu:t1")


@pytest.mark.parametrize("mode", ["ALL", "none", 2])
def test_a_second_window_mode_other_than_true_false_or_all_is_refused(tmp_path, tiny, mode):
    from placer.errors import ProfileError

    with pytest.raises(ProfileError, match="second_window must be True, False or 'all'"):
        profile_graph(tiny, ["onnxruntime"], tmp_path / "x.db", progress=False, second_window=mode)
    assert not (tmp_path / "x.db").exists()  # refused before the store is opened


def test_past_its_hurry_deadline_a_campaign_measures_nothing_twice(tmp_path, tiny, fast_timing):
    """``hurry_after`` (``placer tune`` passes half its budget): past it a disturbed measurement is not
    taken again (it stays flagged for a later campaign) and the 2-thread second windows are left out; a
    deadline still ahead changes nothing. The deadlines are -inf / +inf: no wall clock decides."""
    n_sigs = len(tiny.unique_signatures())
    kw = dict(progress=False, links=False, whole_model=False, timing=fast_timing)
    late = profile_graph(tiny, ["onnxruntime:t2"], tmp_path / "late.db", hurry_after=float("-inf"), **kw)
    assert late.failed == 0 and late.second_windows == 0 and late.remeasured == 0
    assert late.hurried >= n_sigs  # every op's second window, and any disturbed measurement
    rows = [m for m in late.results.values() if m.ok and m.kind == "op"]
    assert len(rows) == n_sigs and all(m.meta["attempts"] == 1 and "windows_ms" not in m.meta for m in rows)
    early = profile_graph(tiny, ["onnxruntime:t2"], tmp_path / "early.db", hurry_after=float("inf"), **kw)
    assert early.second_windows == n_sigs and early.hurried == 0


def test_a_second_window_kept_as_the_lower_carries_its_own_pace_and_session(tmp_path, tiny, fast_timing,
                                                                           monkeypatch):
    """A row's second window taken by a later campaign (the first left it due) and kept as the lower kept
    the first window's pace and session: divided by a pace it was not measured at, and read with the
    first session's drift factor. Here the later campaign times no pace (PLACER_PACE=0)."""
    from placer.profile.engine import ONE_THREAD_WINDOWS_ENV, Engine
    from placer.profile.pace import PACE_ENV
    from placer.profile.store import WINDOW_DUE

    monkeypatch.delenv(ONE_THREAD_WINDOWS_ENV, raising=False)  # one-thread rows take second windows
    db = tmp_path / "p.db"
    kw = dict(progress=False, links=False, whole_model=False, timing=fast_timing)
    with monkeypatch.context() as m:
        m.setenv(PACE_ENV, "1")  # the pace beside each first window
        m.setattr(Engine, "_hurried", lambda self: True)  # every second window left due
        first = profile_graph(tiny, ["onnxruntime"], db, **kw)
    with ProfileStore(db) as st:
        due = [r for r in st.measurements(kind="op") if r["status"] == "ok" and r["meta"].get(WINDOW_DUE)]
        assert due and all(r["meta"].get("pace_ms") for r in due)
        for r in due:  # first windows far slower than any second one: the second is kept
            st.put(r["key"], r["target"], kind="op", status="ok", median_ms=r["median_ms"] * 100,
                   net_ms=(r["net_ms"] or 0) * 100, p10_ms=r["p10_ms"], p90_ms=r["p90_ms"], n=r["n"],
                   meta=r["meta"])
    monkeypatch.setenv(PACE_ENV, "0")
    then = profile_graph(tiny, ["onnxruntime"], db, **kw)
    assert then.second_windows == len(due)
    rows = {k: m for (k, _), m in then.results.items() if m.kind == "op"}
    for r in due:
        meta = rows[r["key"]].meta
        assert rows[r["key"]].median_ms == meta["windows_ms"][1]  # the second window, kept
        assert "pace_ms" not in meta and meta["session"] == then.session != first.session
