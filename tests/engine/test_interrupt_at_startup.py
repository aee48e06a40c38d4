"""ctrl+c while `cockpit` is still starting (Python importing the parser, the subcommand, torch:
seconds on a loaded machine) ends it quietly: `cockpit: interrupted`, exit status 130, no
traceback, and no run directory for a run that had not started. Real processes; the SIGINT is
sent the moment a given module has been imported (`python -X importtime` names each as it is
done), so it lands where the test says whatever the machine's speed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def interrupted_at(module: str, args: list[str], cwd: Path, after_s: float = 0.0) -> tuple[int, list[str]]:
    """Start `python -m cockpit ARGS`, send SIGINT `after_s` after `module` (or one of its
    submodules) is imported; its exit status and the lines of stderr that are its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "cockpit", *args],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    own: list[str] = []
    try:
        for line in proc.stderr:
            if not line.startswith("import time:"):
                own.append(line.rstrip("\n"))
                continue
            name = line.rsplit("|", 1)[-1].strip()
            if name == module or name.startswith(module + "."):
                time.sleep(after_s)
                proc.send_signal(signal.SIGINT)
                break
        else:
            raise AssertionError(f"{module} was never imported: {own}")
        rest = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    own += [line for line in rest.splitlines() if line.strip() and not line.startswith("import time:")]
    return proc.returncode, own


TRAIN = ["train", "--headless", "--preset", "tiny", "--no-telemetry", "--run-dir", "run"]


@pytest.mark.parametrize(
    "module, args",
    [
        ("engine.config", TRAIN),  # the command line's own imports, before its signal handlers
        ("cockpit.cli.launch", TRAIN),  # handlers in place, the run not built yet
        ("torch", TRAIN),  # torch importing
        ("engine.config", ["plan", "--preset", "tiny"]),  # another subcommand, before it runs
        ("torch", ["plan", "--preset", "tiny"]),
        ("cockpit.cli.options", ["--help"]),
    ],
    ids=["train-cli", "train-launch", "train-torch", "plan-cli", "plan-torch", "help"],
)
def test_ctrl_c_while_importing_exits_130_in_one_line(module: str, args: list[str], tmp_path: Path) -> None:
    code, own = interrupted_at(module, args, tmp_path)
    assert not any("Traceback" in line for line in own), own
    assert own == ["cockpit: interrupted"], own
    assert code == 130, (code, own)
    assert not (tmp_path / "run").exists()  # no run was started: nothing left behind


def test_an_interrupt_inside_exec_d_source_still_exits_130(tmp_path: Path) -> None:
    """An import's `exec` of source text (dataclasses, namedtuple, torch's own) that a ctrl+c
    strikes leaves CPython's 'unhandled KeyboardInterrupt' flag set even when the interrupt is
    handled; under `python -m` the process said 'interrupted', then killed itself with SIGINT at
    exit (returncode -2, about one time in three with ctrl+c during torch's import). Struck on
    purpose here, in a module run with -m as `python -m cockpit` is."""
    (tmp_path / "struck.py").write_text(
        "import sys, cockpit.cli.command_line as command_line\n"
        "def main(argv):\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')  # as a dataclass's __init__ is made\n"
        "    except KeyboardInterrupt:  # as command_line.main handles it\n"
        "        print('cockpit: interrupted', file=sys.stderr)\n"
        "        return 130\n"
        "command_line.main = main\n"
        "from cockpit.cli import main as cockpit\n"
        "sys.exit(cockpit([]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "struck"], env=env, capture_output=True, text=True, timeout=60)
    assert done.stderr.splitlines() == ["cockpit: interrupted"], done.stderr
    assert done.returncode == 130


# The first training step sends its own process a SIGTERM: the signal lands while the step runs
# (the step counter still 0), whatever the machine's speed.
SIGTERM_IN_FIRST_STEP = """
import os, signal, sys
import engine.train.run as run_module
real_step = run_module.train_step
def first_step(*args, **kwargs):
    run_module.train_step = real_step
    os.kill(os.getpid(), signal.SIGTERM)
    return real_step(*args, **kwargs)
run_module.train_step = first_step
from cockpit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_during_the_first_step_saves_nothing_as_it_says(tmp_path: Path) -> None:
    """'stopping before the first step (nothing trained yet: no checkpoint)' was followed by
    'saved 1 | ... (stop)': the step under way finished and the stop saved it. What the line
    says is what happens: no checkpoint, and the run stops (exit 0, its state on disk)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SIGTERM_IN_FIRST_STEP, *TRAIN, "--set", "sample.interval=0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    said = done.stdout + done.stderr
    promise = "SIGTERM: stopping before the first step (nothing trained yet: no checkpoint)"
    assert promise in said, said
    assert "saved" not in said, said
    assert not list((tmp_path / "run").glob("*.pt")), said
    assert "stopped at step 1: SIGTERM" in done.stdout, said
    assert done.returncode == 0, said
