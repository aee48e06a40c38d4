"""The `set` command over the control socket, from a raw client: a plain AF_UNIX socket speaking
JSON lines, none of cockpit's client code, against a real tiny run in a thread. A set is
acknowledged by settings_changed naming the viewer, the optimizer applies the new value; a
model key is refused by an alert that says why, nothing changed; a malformed set and a read-only
viewer's are refused in one line; the run's journal has one entry per set."""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config.presets import load_preset
from engine.control import wire
from engine.events import RunState
from engine.rundir.journal import read_journal
from engine.train.trainer import Trainer

TIMEOUT_S = 30.0
WHO = "raw-test"


class RawClient:
    """A viewer as any program would write it: a socket, json, and newline-ended lines."""

    def __init__(self, path: Path, hello: dict[str, Any]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT_S)
        self.sock.connect(str(path))
        self.stream = self.sock.makefile("rb")
        self.send({"hello": hello, "id": "hi"})
        self.hello = self.read()
        assert self.hello["kind"] == "hello"
        self.until(lambda m: m == {"kind": "live"})

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self) -> dict[str, Any]:
        line = self.stream.readline()
        assert line, "the run hung up"
        return json.loads(line)

    def until(self, check: Any) -> dict[str, Any]:
        while not check(message := self.read()):
            pass
        return message

    def reply(self, ident: Any) -> dict[str, Any]:
        return self.until(lambda m: m.get("kind") == "reply" and m.get("id") == ident)

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Trainer]:
    cfg = load_preset(
        "tiny", ["train.max_steps=100000", "eval.interval=0", "sample.interval=0",
                 "checkpoint.interval=0"],
    )  # fmt: skip
    trainer = Trainer(cfg, run_dir=tmp_path / "run", telemetry=False, interactive=False)
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not (tmp_path / "run" / wire.SOCKET_NAME).exists() or trainer.step < 2:
        assert time.monotonic() < deadline and thread.is_alive(), trainer.drain_events()[-3:]
        time.sleep(0.01)
    yield trainer
    trainer.stop(checkpoint=False)
    thread.join(TIMEOUT_S)
    assert not thread.is_alive()


def test_a_raw_client_sets_weight_decay_and_max_steps_and_is_refused_a_model_key(run: Trainer) -> None:
    client = RawClient(run.run_dir / wire.SOCKET_NAME, {"who": WHO})
    me = f"viewer {client.hello['viewer']} {WHO}"
    client.send({"cmd": "set", "id": 1,
                 "settings": {"optim.weight_decay": 0.0, "train.max_steps": 5000}})  # fmt: skip
    assert client.reply(1)["ok"] is True  # queued; the event is the acknowledgement
    ack = client.until(lambda m: m.get("kind") == "settings_changed")
    assert ack["by"] == me and ack["replayed"] is False
    assert ack["changes"] == {
        "optim.weight_decay": [0.1, 0.0], "train.max_steps": [100000, 5000],
        "schedule.decay_steps": [0, 100000],  # the cosine keeps its horizon: the LR goes on
    }  # fmt: skip
    assert ack["max_steps"] == 5000
    # the optimizer applies it from the next step: every group's decay is 0 now
    later = client.until(lambda m: m.get("kind") == "step" and m["step"] > ack["step"] + 1)
    assert later["step"] > ack["step"]
    groups = run.built.parts.optimizer.param_groups
    assert {g["weight_decay"] for g in groups} == {0.0}  # every group
    assert run.cfg.train.max_steps == 5000

    # a key no run may change: refused in the reply itself, nothing queued
    client.send({"cmd": "set", "id": 2, "settings": {"model.n_layer": 8}})
    refused = client.reply(2)
    assert refused["ok"] is False
    assert refused["error"].startswith("set refused: model.n_layer cannot change while the run trains")
    assert "\n" not in refused["error"] and refused["error"].endswith("is a new run")
    assert run.cfg.model.n_layer == load_preset("tiny").model.n_layer  # nothing changed

    # malformed: answered by the reply itself, one line, nothing queued
    for ident, settings, says in (
        (3, [], "set: settings must be an object"),
        (4, {}, "set: settings is empty"),
        (5, {"optim.lr": {"peak": 1}}, "set: optim.lr must be a scalar or a list of strings"),
    ):
        client.send({"cmd": "set", "id": ident, "settings": settings})
        reply = client.reply(ident)
        assert reply["ok"] is False and reply["error"].startswith(says), reply
    client.send({"cmd": "set", "id": 6})
    assert client.reply(6)["error"] == "set: missing settings"

    watcher = RawClient(run.run_dir / wire.SOCKET_NAME, {"who": "watcher", "read_only": True})
    watcher.send({"cmd": "set", "id": 7, "settings": {"optim.grad_clip": 0.5}})
    reply = watcher.reply(7)
    assert reply["ok"] is False and reply["error"] == "set: this viewer is read-only"
    client.send({"cmd": "pause", "id": 8})  # after the read-only set: nothing came of it
    client.until(lambda m: m.get("kind") == "state" and m["state"] == "paused")
    assert run.cfg.optim.grad_clip == 1.0
    client.close()
    watcher.close()

    journal = read_journal(run.run_dir / "metrics.jsonl")
    entries = [e.line for e in journal if e.who == me and e.what.startswith("set")]
    # the model key, the malformed and the read-only sets never reached the run
    assert entries == [
        f"{me}: set optim.weight_decay 0.1 -> 0, train.max_steps 100000 -> 5000, "
        "schedule.decay_steps 0 -> 100000"
    ]


# ---------------------------------------------------------------- examples/set_at.py

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "set_at.py"


def set_at(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The example as a user runs it, outside the checkout (it needs nothing of cockpit)."""
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args], cwd=cwd, capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_the_example_sets_at_a_step_says_so_and_says_a_refusal_in_one_line(
    run: Trainer, tmp_path: Path
) -> None:
    # paused while the example connects: on a quiet machine tiny trains 20 steps in less time
    # than the example takes to start, and it would find the step passed (nothing to wait for)
    run.pause()
    deadline = time.monotonic() + TIMEOUT_S
    while run.state != RunState.PAUSED:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    at = run.step + 20
    waiting = subprocess.Popen(
        [sys.executable, str(EXAMPLE), str(run.run_dir), "--step", str(at), "optim.weight_decay=0.0",
         "eval.interval=50"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said = waiting.stderr.readline()
    run.resume()
    out, err = waiting.communicate(timeout=TIMEOUT_S)
    done = subprocess.CompletedProcess(waiting.args, waiting.returncode, out, said + err)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"waiting for step {at}: the run is paused at step ")
    line = one_line(done.stdout)
    step = int(line.split()[3].rstrip(":"))
    assert step >= at and line == f"set at step {step}: optim.weight_decay 0.1 -> 0.0, eval.interval 0 -> 50"
    assert run.cfg.optim.weight_decay == 0.0 and run.cfg.eval.interval == 50

    again = set_at(str(run.run_dir), "optim.weight_decay=0", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert one_line(again.stdout).startswith("set at step ")
    assert "nothing changed (settings unchanged: " in again.stdout

    refused = set_at(str(run.run_dir), "data.tokenizer=gpt2", cwd=tmp_path)
    assert refused.returncode == 1 and refused.stdout == ""
    assert one_line(refused.stderr).startswith(
        "set_at: the run refused: set refused: data.tokenizer cannot change while the run trains"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("optim.lr=1e-3",), "no live run answers in "),
        (("weight_decay",), "'weight_decay' is not KEY=VALUE"),
    ],
)
def test_the_examples_bad_input_and_no_run_are_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = set_at(str(tmp_path / "no-run"), *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done.stderr).startswith(f"set_at: {says}"), done.stderr


def test_the_example_needs_only_the_standard_library() -> None:
    tree = ast.parse(EXAMPLE.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}  # fmt: skip
    assert imported and imported <= set(sys.stdlib_module_names), imported


def test_the_example_on_a_run_that_is_not_live_says_how_to_change_it(tmp_path: Path) -> None:
    stopped = tmp_path / "stopped-run"
    stopped.mkdir()
    (stopped / "metrics.jsonl").write_text("")  # a run directory whose run no longer listens
    done = set_at(str(stopped), "optim.lr=1e-3", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done.stderr) == (
        f"set_at: the run in {stopped} is not live (it finished, stopped or crashed); resume it "
        f"with: cockpit train --resume {stopped} --set KEY=VALUE"
    )
