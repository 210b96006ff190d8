"""`placer --version` and the help texts are for users: the package's version, a plain-language
description with examples, a description on every command, no reStructuredText markup."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

import placer
from placer.cli import build_parser, main

# reStructuredText roles and literals from developer docstrings: ``x``, :class:`x`, :func:`x`, ...
RST = re.compile(r"``|:(class|func|meth|mod|attr|data|exc|obj|ref|doc):`")


def _expected_version() -> str:
    try:
        return version("placer")
    except PackageNotFoundError:
        return placer.__version__


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr()
    assert out.err == ""
    return out.out


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return list(sub.choices)


def test_version(capsys):
    assert _help(["--version"], capsys).strip() == f"placer {_expected_version()}"


def test_version_matches_package():
    # the fallback and the metadata agree (an editable install of this checkout)
    assert _expected_version() == placer.__version__


def test_version_as_a_module():
    # `python -m placer.cli` is what the `placer` console script runs
    out = subprocess.run([sys.executable, "-m", "placer.cli", "--version"], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == f"placer {_expected_version()}"


def test_top_level_help(capsys):
    text = _help(["--help"], capsys)
    assert not RST.search(text), text
    assert text.startswith("usage: placer")
    assert "--version" in text
    assert "ONNX Runtime" in text and "OpenVINO" in text and "TVM" in text
    assert "examples:" in text
    examples = [line.split()[:2] for line in text.split("examples:", 1)[1].splitlines()
                if line.startswith("  placer ")]
    assert len(examples) >= 3
    commands = _commands()
    for _, cmd in examples:  # every example names a real command
        assert cmd in commands
    for cmd in commands:  # every command is listed
        assert re.search(rf"^\s+{cmd}\s+\S", text, re.M), cmd


@pytest.mark.parametrize("command", _commands())
def test_command_help(command, capsys):
    text = _help([command, "--help"], capsys)
    assert text.startswith(f"usage: placer {command}")
    assert not RST.search(text), text
    # a description paragraph between the usage and the argument list
    body = text.split("\n\n", 1)[1]
    assert not body.startswith(("positional arguments:", "options:")), text


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9"])
def test_bench_profile_timeout_is_checked_as_profile_s(value, capsys):
    """`placer bench profile --timeout 0` stored every op as timed out in the --db store (later campaigns
    then priced them at inf); nan was a traceback from select()."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "profile", "--timeout", value])
    assert "--timeout" in capsys.readouterr().err
    assert build_parser().parse_args(["bench", "profile", "--timeout", "30"]).timeout == 30.0


@pytest.mark.parametrize("argv, option", [
    (["plan", "zoo:tiny", "--out", ""], "--out"),
    (["tune", "zoo:tiny", "--out", "  "], "--out"),
    (["tune", "zoo:tiny", "--cost-model", ""], "--cost-model"),
    (["tune", "zoo:tiny", "--storage", ""], "--storage"),
    (["fit", "--out", ""], "--out"),
    (["run", "placer-out", "--json", ""], "--json"),
    (["bench", "profile", "--json", ""], "--json"),
])
def test_an_empty_path_is_refused_where_it_is_parsed(argv, option, capsys):
    """`--out ""` wrote nothing (plan) or fell back to a default place unasked (tune, fit); `--cost-model
    ""` updated the default cost model."""
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert option in err and "expected a path" in err, err


def test_a_cost_model_and_no_cost_model_cannot_be_asked_for_together(capsys):
    """`--cost-model DIR --no-cost-model` silently left DIR unused."""
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["tune", "zoo:tiny", "--cost-model", "cm", "--no-cost-model"])
    assert e.value.code == 2
    assert "not allowed with argument --cost-model" in capsys.readouterr().err
    assert build_parser().parse_args(["tune", "zoo:tiny", "--cost-model", "cm"]).cost_model == "cm"
    assert build_parser().parse_args(["tune", "zoo:tiny", "--no-cost-model"]).no_cost_model is True
