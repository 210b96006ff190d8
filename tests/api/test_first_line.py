"""placer.errors.first_line: the one line of an exception's message that error reports quote."""

from __future__ import annotations

import pytest

from placer.errors import first_line


@pytest.mark.parametrize("message, line", [
    ("", "RuntimeError"),                   # an empty message: the type's name
    ("   \n\t", "RuntimeError"),            # a blank one too
    ("compile failed", "compile failed"),
    ("compile failed\n  at line 3", "compile failed"),
    ("\n\nInternalError: bad shape\nstack", "InternalError: bad shape"),  # leading blank lines skipped
    ("  indented  \nmore", "indented  "),    # the message's surrounding whitespace dropped, not the line's
    ("\x1cfile separator", "file separator"),
])
def test_first_line(message, line):
    assert first_line(RuntimeError(message)) == line


def test_first_line_is_cut_at_the_limit():
    assert first_line(ValueError("x" * 500)) == "x" * 300
    assert first_line(ValueError("x" * 500), limit=20) == "x" * 20
