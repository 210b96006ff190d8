"""Every malformed or hostile input of the corpus gets one clear error through the real CLI.

The corpus (``corpus.py``) is generated at test time; each case runs ``placer.cli.main`` in this
process (or, for cost-model files, which no command reads, ``costmodels.persistence``) and is
classified as a clear error, an unclear message, a crash, a hang or a wrongly accepted input.
A handful run again through a real ``placer`` subprocess to prove the exit codes and that no
traceback reaches the user.
"""

from __future__ import annotations

import subprocess

import pytest
from rel_support import ROOT, python, subprocess_env
from corpus import CONTROL, category_counts, expected_kind, run_case, summarize

MIN_INPUTS = 400


# the control with costs of 1e308 ms makes numpy warn about an overflow inside CP-SAT's cost scaling
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_corpus_every_input_is_a_clear_error(cases, capsys):
    outcomes = [run_case(c) for c in cases]
    line, counts = summarize(outcomes)
    cats = category_counts([c for c in cases if c.category != CONTROL])
    with capsys.disabled():
        print(f"\n{line}\nreliability corpus categories: "
              + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    controls = [o for o in outcomes if o.case.category == CONTROL]
    assert controls and all(o.kind == "ok" for o in controls), "\n".join(o.describe() for o in controls
                                                                          if o.kind != "ok")
    bad = [o for o in outcomes if o.case.category != CONTROL and o.kind != expected_kind(o.case)]
    assert not bad, f"{line}\n" + "\n".join(o.describe() for o in bad)
    assert sum(counts.values()) >= MIN_INPUTS
    assert counts["crash"] == counts["hang"] == counts["escape"] == counts["accepted"] == 0


# (case name, exit code): a few of every kind, through a real process
SUBPROCESS_CASES = {
    "tiny-model": 0,
    "random-bytes-1000": 2,
    "truncated-50pct": 2,
    "cycle": 2,
    "2^40-elements": 2,
    "shape[x=99999999999999999999x3x8x8]": 2,
    "budget[inf]": 2,
    "model-swapped-same-op-names": 2,
    "partition-from-other-weights": 2,
    "nan-makespan": 2,
    "file-escapes-dir": 2,
    "nan-cost": 2,
    "newer-schema[fit]": 2,
    "pickled-object-array": 2,
}


def test_subprocess_exit_codes_and_no_traceback(cases):
    by_name = {c.name: c for c in cases if c.argv is not None}
    missing = sorted(set(SUBPROCESS_CASES) - set(by_name))
    assert not missing, missing
    env = subprocess_env()
    for name, want_rc in SUBPROCESS_CASES.items():
        case = by_name[name]
        p = subprocess.run([python(), "-m", "placer.cli", *case.argv], cwd=ROOT, env=env, capture_output=True, check=False,
                           text=True, timeout=120)
        assert p.returncode == want_rc, f"{name}: rc {p.returncode}\n{p.stderr[-3000:]}"
        assert "Traceback" not in p.stderr, f"{name}:\n{p.stderr[-3000:]}"
        if want_rc:
            errors = [ln for ln in p.stderr.splitlines() if ": error: " in ln]
            assert len(errors) == 1 and errors[0].startswith("placer "), f"{name}:\n{p.stderr[-3000:]}"
            assert all(e.lower() in errors[0].lower() for e in case.expect), f"{name}: {errors[0]}"


CATEGORIES = ("onnx", "graph", "dtype", "dims", "ops", "args", "inputs", "plan_dir", "plan_json", "stage_config",
              "problem", "store", "costmodel",
              # the second round (corpus_hostile.py)
              "files", "json", "numbers", "types", "escapes", "overwrite", "trust", "report",
              # the third round (corpus_limits.py): sizes and time limits
              "limits")


def test_every_category_is_represented(cases):
    counts = category_counts(cases)
    assert {c: counts.get(c, 0) for c in CATEGORIES if counts.get(c, 0) < 5} == {}
