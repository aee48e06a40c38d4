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
            ["export"],
            "cockpit export: missing RUN_DIR|CKPT and --format: give cockpit export RUN_DIR|CKPT --format FORMAT (cockpit export --help)",
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


# ---------------------------------------------------------------------------------------------
# An unknown --set key: the closest keys, or where every key is listed; never all 81 in a line.


@pytest.mark.parametrize(
    "setting, said",
    [
        ("lrr=1", "--set: unknown key 'lrr' (did you mean 'optim.lr'?)"),
        ("optim.lrr=1", "--set optim: unknown key 'lrr' (did you mean 'lr'?)"),
        ("interva=3", "--set: unknown key 'interva' (did you mean 'eval.interval', 'sample.interval' or 'checkpoint.interval'?)"),
        ("a=1", "--set: unknown key 'a' (no key is like it; every key, with its help: cockpit presets show default)"),
        ("model.zzz=1", "--set model: unknown key 'zzz' (no key is like it; every key, with its help: cockpit presets show default)"),
    ],
)
def test_an_unknown_set_key_names_the_closest_keys_or_where_they_are_listed(capsys, setting, said):
    code = main(["train", "--headless", "--no-telemetry", "--set", setting])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == f"cockpit: {said}\n"
    assert "data.tokenizer" not in captured.err  # not the whole list of keys


def test_the_command_that_lists_every_key_does(capsys):
    main(["presets", "show", "default"])
    out = capsys.readouterr().out
    assert "[optim]" in out and "\nlr = " in out and "[checkpoint]" in out
