"""A mistake argparse catches, on any subcommand, is one line: the option, what was wrong, and
where the help is; exit status 2. `--help` still prints the whole usage."""

from __future__ import annotations

import pytest

from cockpit.cli import main


def error_of(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["ablate", "--steps", "abc"],
            "cockpit ablate: --steps: 'abc' is not a whole number; e.g. --steps 300 (cockpit ablate --help)",
        ),
        (
            ["sample", "RUN", "--temperature", "hot"],
            "cockpit sample: --temperature: 'hot' is not a number; e.g. --temperature 0.8 (cockpit sample --help)",
        ),
        (
            ["train", "--port", "x"],
            "cockpit train: --port is not an option of cockpit train (cockpit train --help)",
        ),
        (  # `cockpit --bogus` is `cockpit train --bogus`
            ["--bogus"],
            "cockpit train: --bogus is not an option of cockpit train (cockpit train --help)",
        ),
        (
            ["presets", "show", "tiny", "--bogus"],
            "cockpit presets show: --bogus is not an option of cockpit presets show (cockpit presets show --help)",
        ),
        (
            ["presets", "show"],
            "cockpit presets show: missing NAME|PATH: give cockpit presets show NAME|PATH (cockpit presets show --help)",
        ),
        (
            ["data", "frob"],
            "cockpit data: ACTION: 'frob' is not one of prepare, ls, rm (cockpit data --help)",
        ),
        (
            ["ablate", "--steps"],
            "cockpit ablate: --steps needs a value; e.g. --steps 300 (cockpit ablate --help)",
        ),
    ],
)
def test_an_argparse_error_is_one_line(capsys, argv, expected):
    err = error_of(capsys, *argv)
    assert "usage:" not in err
    assert err == expected + "\n"


@pytest.mark.parametrize("name", ["train", "ablate", "sample", "serve", "runs", "presets", "data"])
def test_every_subcommand_s_bad_option_is_one_line_naming_it(capsys, name):
    positional = {"data": ["ls"], "sample": ["RUN"]}.get(name, [])
    argv = [name, "--no-such-option", *positional]
    err = error_of(capsys, *argv)
    assert err.count("\n") == 1, err
    assert "--no-such-option" in err and f"cockpit {name}" in err and "--help" in err


def test_help_still_prints_the_whole_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["ablate", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cockpit ablate")
    assert "--steps N" in out and "--repeat-baseline K" in out
