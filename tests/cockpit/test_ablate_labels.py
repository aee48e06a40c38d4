"""A change's name is anyone's to write: printed raw, `name = "\\u001b]0;owned\\u0007"` retitled
the terminal and `\\u001b[31m` recoloured it. What `cockpit ablate` prints shows its control
characters as escapes (`\\x1b`), in the progress lines and in the table. A real headless series
of two 2-step tiny runs."""

from __future__ import annotations

from pathlib import Path

from tiny import set_args, tiny_overrides

from cockpit.cli import main

ESCAPING_NAME = "\\u001b[31mred\\u001b]0;owned\\u0007"


def test_a_change_name_with_escape_sequences_is_printed_as_escapes(tmp_path: Path, capsys) -> None:
    series = tmp_path / "series.toml"
    series.write_text(
        f'preset = "tiny"\nsteps = 2\n[[change]]\nname = "{ESCAPING_NAME}"\n"optim.lr" = 2e-3\n'
    )
    argv = ["ablate", str(series), "--headless", "--no-telemetry", "--runs", str(tmp_path / "runs")]
    code = main([*argv, *set_args(tiny_overrides(quiet=True))])
    out = capsys.readouterr()
    said = out.out + out.err
    assert code == 0, said
    assert "\x1b" not in said and "\x07" not in said
    assert "\\x1b[31mred\\x1b]0;owned\\x07" in said  # the label, still recognisable


def test_a_series_name_with_escape_sequences_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """--name is the series' directory, printed in every progress line: refused, shown escaped."""
    argv = ["ablate", "--preset", "tiny", "--change", "optim.lr=2e-3", "--name", "a\x1b[31mb"]
    code = main([*argv, "--runs", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        "cockpit ablate: --name 'a\\x1b[31mb': a plain directory name, e.g. --name muon-vs-adamw\n"
    )
    assert not (tmp_path / "runs").exists()
