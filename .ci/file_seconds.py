"""Seconds each test file took, from a JUnit XML report, as tests/file_seconds.json.

    python -m pytest -q --junitxml=junit.xml && python .ci/file_seconds.py junit.xml

tests/conftest.py starts the longest files first: with ``--dist loadfile`` a file runs on one
worker, and a long file left for the end keeps one worker busy while the others idle. The figures
only order the files; a file missing from them (a new one) starts last.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "file_seconds.json"


def file_seconds(junit_xml: str) -> dict[str, float]:
    seconds: Counter = Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        # classname "tests.tune.test_tune" (a class inside adds ".TestX": the file is the test_* part)
        parts = case.get("classname", "").split(".")
        stem = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        seconds["/".join(parts[:stem + 1]) + ".py"] += float(case.get("time") or 0.0)
    return {f: round(s, 1) for f, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    OUT.write_text(json.dumps(file_seconds(sys.argv[1]), indent=1) + "\n")
    print(f"wrote {OUT}")
