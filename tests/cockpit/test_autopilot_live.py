"""`cockpit autopilot` on a real tiny run in a thread, serving its control socket: a plateau
makes it cool the run down, the journal credits the autopilot, and the LR follows the decay."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from command_here import cockpit_here
from tiny import tiny_overrides

from engine.config.presets import load_preset
from engine.control import wire
from engine.rundir.journal import read_journal
from engine.train.trainer import Trainer

TIMEOUT = 30.0
RULES = """
[[rule]]
when = "plateau"
evals = 2
min_delta = 100.0  # no evaluation betters the first by this: a plateau from the third on
do = "cooldown 6"
"""


def records_of(run_dir: Path) -> list[dict]:
    """The run's metrics records so far (a line being written is left out)."""
    records = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return records


def start_run(run_dir: Path, schedule: str = "wsd") -> tuple[Trainer, threading.Thread]:
    overrides = tiny_overrides(
        f"schedule.kind={schedule}", "schedule.warmup_steps=0", "optim.lr=3e-3", "schedule.min_lr=1e-5",
        "eval.interval=3", "sample.interval=0", "checkpoint.interval=0", "train.max_steps=100000",
    )  # fmt: skip
    trainer = Trainer(
        load_preset("tiny", overrides), run_dir=run_dir, telemetry=False, interactive=False
    )
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not (run_dir / wire.SOCKET_NAME).exists() or trainer.step < 1:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    return trainer, thread


class Hook:
    """An HTTP server on 127.0.0.1 that records the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def test_a_plateau_cools_the_run_down_as_the_autopilots_doing(tmp_path: Path) -> None:
    rules = tmp_path / "night.toml"
    rules.write_text(RULES)
    run_dir = tmp_path / "run"
    hook = Hook()
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "COCKPIT_NOTIFY": f"json:{hook.url}"}
    trainer, thread = start_run(run_dir)
    try:
        done = cockpit_here("autopilot", str(run_dir), "--rules", str(rules), env=env)
    finally:
        trainer.stop(checkpoint=False)
        thread.join(TIMEOUT)
        hook.server.shutdown()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"autopilot: watching {run_dir} with 1 rules from {rules}"
    assert "rule 1 (plateau): plateau: 2 evaluations without a val loss below the best " in lines[1]
    assert " by more than 100 (evals = 2); the newest " in lines[1]
    assert lines[1].endswith("; doing: cooldown 6")
    assert lines[2].startswith("step ") and ": the run took it: " in lines[2]
    assert lines[-1].startswith("autopilot: the run finished at step ")

    records = records_of(run_dir)
    changed = [r for r in records if r["kind"] == "settings_changed"]
    assert len(changed) == 1  # once, not at every evaluation after
    assert changed[0]["by"].endswith(f"autopilot (rules {rules})")
    assert changed[0]["changes"]["train.max_steps"][1] == changed[0]["step"] + 6
    entries = [e for e in read_journal(run_dir / "metrics.jsonl") if "autopilot" in e.who]
    step = changed[0]["step"]
    assert [(e.who, e.what) for e in entries] == [
        (f"viewer 1 autopilot (rules {rules})", "attached"),
        (
            f"viewer 1 autopilot (rules {rules})",
            f"set schedule.decay_start 0 -> {step}, train.max_steps 100000 -> {step + 6}",
        ),
    ]
    # the LR decays from the cool-down on, to the floor at the run's end
    lrs = [r["lr"] for r in records if r["kind"] == "step" and r["step"] > changed[0]["step"]]
    assert lrs == sorted(lrs, reverse=True) and lrs[1] < 3e-3 and lrs[-1] < 1e-3
    assert records[-1]["kind"] == "state" and records[-1]["state"] == "finished"
    # the action is a notice too, to the endpoints this user's runs notify
    assert [(b["kind"], b["title"], b["run"]) for b in hook.bodies] == [
        ("action", f"cockpit: autopilot (rules {rules}) acted on tiny", "run")
    ]
    assert hook.bodies[0]["body"].startswith("step ")
    assert hook.bodies[0]["body"].endswith("; cooldown 6")


def test_a_dry_run_only_says_sigterm_ends_it_and_an_absent_run_is_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "night.toml"
    rules.write_text(RULES)
    absent = cockpit_here("autopilot", str(tmp_path), "--rules", str(rules))
    assert absent.returncode == 2
    assert absent.stderr.startswith(f"cockpit autopilot: no live run in {tmp_path}")
    assert absent.stderr.count("\n") == 1
    run_dir = tmp_path / "run"
    trainer, thread = start_run(run_dir)
    result: list = []
    runner = threading.Thread(target=lambda: None)
    try:
        deadline = time.monotonic() + TIMEOUT

        # the run goes on: stop it once the dry run has said what it would do
        def stop_when_said() -> None:
            # the autopilot has attached (its signal handlers are in place), then 4 evaluations:
            # a plateau it would act on
            attached = False
            while time.monotonic() < deadline:
                kinds = [r["kind"] for r in records_of(run_dir)]
                attached = "viewer" in kinds
                if attached and kinds[kinds.index("viewer") :].count("eval") >= 4:
                    break
                time.sleep(0.05)
            if attached:
                os.kill(os.getpid(), signal.SIGTERM)  # the autopilot's, as `kill` sends it
            else:
                trainer.stop(checkpoint=False)  # the test fails, but ends

        runner = threading.Thread(target=stop_when_said, daemon=True)
        runner.start()
        result.append(cockpit_here("autopilot", str(run_dir), "--rules", str(rules), "--dry-run"))
    finally:
        trainer.stop(checkpoint=False)
        thread.join(TIMEOUT)
        runner.join(TIMEOUT)
    done = result[0]
    assert done.returncode == 0, done.stderr
    assert "would do: cooldown 6" in done.stdout
    assert "doing:" not in done.stdout
    records = records_of(run_dir)
    assert not [r for r in records if r["kind"] == "settings_changed"]
    assert done.stdout.splitlines()[-1] == "autopilot: stopped; the run goes on"


def test_a_cooldown_the_run_refuses_is_said_in_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "night.toml"
    rules.write_text(RULES)
    run_dir = tmp_path / "run"
    trainer, thread = start_run(run_dir, schedule="cosine")
    said = threading.Event()
    try:
        deadline = time.monotonic() + TIMEOUT

        def stop_when_refused() -> None:
            while time.monotonic() < deadline and not said.is_set():
                if any(r.get("code") == "set" for r in records_of(run_dir)):
                    break
                time.sleep(0.05)
            time.sleep(0.3)  # the autopilot reads the refusal before the run ends
            trainer.stop(checkpoint=False)

        runner = threading.Thread(target=stop_when_refused, daemon=True)
        runner.start()
        done = cockpit_here("autopilot", str(run_dir), "--rules", str(rules))
    finally:
        said.set()
        trainer.stop(checkpoint=False)
        thread.join(TIMEOUT)
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if "the run refused: " in line]
    assert len(refused) == 1 and "cosine" in refused[0], done.stdout
