"""Notifications posted to real HTTP servers on 127.0.0.1: each format's body and headers, a
real run's notices (finished, a NaN), the stall rule, the user's notify.toml and --notify
refused in one line when malformed, and an endpoint that hangs or fails: the run goes on at its
pace, and says so once."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from command_here import cockpit_here
from tiny import set_args, tiny_overrides

from cockpit.cli.launch import make_trainer, train_arguments
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.events import Alert, Eval, StateChanged, Step
from engine.rundir import (
    FORMATS,
    Notice,
    Notifications,
    StallWatch,
    action_notice,
    infer_format,
    load_notify_file,
    notice_for,
    notify_senders,
    parse_endpoint,
    redact,
)
from engine.train.cadence import val_target_note
from engine.train.trainer import Trainer

WHEN = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


class Hook:
    """An HTTP server in a thread that records each POST (path, headers, body) and answers 200,
    500 (`mode="error"`) or never (`mode="hang"`, until closed)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.released = threading.Event()
        self.arrived = threading.Condition()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hook.arrived:
                    hook.requests.append((self.path, dict(self.headers), body))
                    hook.arrived.notify_all()
                if hook.mode == "hang":
                    hook.released.wait(30)
                    return
                self.send_response(500 if hook.mode == "error" else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def wait_for(
        self, count: int, timeout: float = 10.0
    ) -> list[tuple[str, dict[str, str], bytes]]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.requests) >= count, timeout)
            return list(self.requests)

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hooks() -> Iterator[Callable[..., Hook]]:
    made: list[Hook] = []

    def make(mode: str = "ok") -> Hook:
        made.append(Hook(mode))
        return made[-1]

    yield make
    for hook in made:
        hook.close()


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own $XDG_CONFIG_HOME (a notify.toml there would reach other tests' runs)."""
    home = tmp_path / "config"
    (home / "cockpit").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("COCKPIT_NOTIFY", raising=False)
    return home


def test_each_format_is_posted_with_its_body_and_headers(hooks: Callable[..., Hook]) -> None:
    hook = hooks()
    endpoints = [parse_endpoint(f"{fmt}:{hook.url('/' + fmt + '/SECRET')}") for fmt in FORMATS]
    notes = Notifications(endpoints, preset="tiny", run="tiny-2027")
    notes.notify(
        Notice("cockpit: tiny failed", "tiny failed at step 12: disk full", "failed", 12), WHEN
    )
    notes.close(wait_s=10)
    got = {path.split("/")[1]: (headers, body) for path, headers, body in hook.requests}
    assert sorted(got) == sorted(FORMATS)
    headers, body = got["json"]
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "title": "cockpit: tiny failed", "body": "tiny failed at step 12: disk full",
        "kind": "failed", "run": "tiny-2027", "preset": "tiny", "step": 12,
        "time": "2027-01-15T08:00:00+00:00",
    }  # fmt: skip
    headers, body = got["ntfy"]
    assert body == b"tiny failed at step 12: disk full"
    assert (headers["Title"], headers["Tags"], headers["Priority"]) == (
        "cockpit: tiny failed", "cockpit,failed", "4",
    )  # fmt: skip
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    headers, body = got["slack"]
    assert json.loads(body) == {"text": "*cockpit: tiny failed*\ntiny failed at step 12: disk full"}
    headers, body = got["discord"]
    assert json.loads(body) == {
        "content": "**cockpit: tiny failed**\ntiny failed at step 12: disk full"
    }
    assert all(h["User-Agent"] == "cockpit" for h, _ in got.values())


def test_the_format_is_inferred_from_the_url_and_its_secret_is_never_shown() -> None:
    assert infer_format("https://hooks.slack.com/services/T0/B0/XYZ") == "slack"
    assert infer_format("https://discord.com/api/webhooks/1/abc") == "discord"
    assert infer_format("https://ntfy.sh/my-topic") == "ntfy"
    assert infer_format("https://ntfy.example.org/my-topic") == "ntfy"
    assert infer_format("https://example.org/hook") == "json"
    assert parse_endpoint("discord:https://example.org/relay").format == "discord"
    assert (
        redact("https://user:pw@hooks.slack.com/services/T0/B0/XYZ?x=1")
        == "https://hooks.slack.com/…"
    )
    assert redact("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("ftp://example.org/x", "is not an http(s) URL; give one such as https://ntfy.sh/TOPIC"),
        ("teams:https://example.org/SECRET", "unknown format 'teams'; the formats are json, ntfy, slack, discord"),
        ("https://example.org:http/SECRET", "has a port that is not a number"),
    ],
)  # fmt: skip
def test_a_malformed_notify_flag_is_one_line_and_exit_2_before_the_run(
    given: str, said: str, config_home: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    done = cockpit_here(
        "train", "--headless", "--no-telemetry", "--run-dir", str(run_dir),
        *set_args(tiny_overrides("train.max_steps=2", quiet=True)), "--notify", given,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "SECRET" not in done.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[[endpoint]\nurl = 1", "fix the TOML"),
        ("[[endpoint]]\nurl = 'https://example.org/SECRET'\ncolour = 'red'", "endpoint 1: unknown key 'colour'"),
        ("[[endpoint]]\nformat = 'slack'", "endpoint 1: url is missing"),
        ("[[endpoint]]\nurl = 'https://example.org/SECRET'\nformat = 'teams'", "format 'teams' is not one of json, ntfy, slack, discord"),
        ("[[endpoint]]\nurl = 'https://example.org/SECRET'\nevents = ['done']", "unknown event 'done'; the events are finished, failed"),
        ("[[endpoint]]\nurl = 'example.org/SECRET'", "is not an http(s) URL"),
        ("endpoint = 'https://example.org/SECRET'", "endpoint must be [[endpoint]] tables"),
        ("[endpoints]\nurl = 'x'", "unknown key 'endpoints'; list endpoints as [[endpoint]] tables"),
    ],
)  # fmt: skip
def test_a_malformed_notify_file_is_one_line_naming_it(
    text: str, said: str, config_home: Path
) -> None:
    path = config_home / "cockpit" / "notify.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_notify_file()
    message = str(refused.value)
    assert message.startswith(str(path)) and said in message and "\n" not in message, message
    assert "SECRET" not in message


def test_the_notify_file_gives_endpoints_with_their_events(config_home: Path) -> None:
    assert load_notify_file() == []  # no file: no endpoint
    (config_home / "cockpit" / "notify.toml").write_text(
        "[[endpoint]]\nurl = 'https://ntfy.sh/topic'\nevents = ['finished', 'fault']\n"
        "[[endpoint]]\nurl = 'https://example.org/hook'\nformat = 'slack'\n",
        encoding="utf-8",
    )
    ntfy, slack = load_notify_file()
    assert (ntfy.format, slack.format) == ("ntfy", "slack")
    assert ntfy.wants("finished") and ntfy.wants("nan") and not ntfy.wants("stall")
    assert slack.wants("stall")


def test_the_rules_name_a_target_reached_and_an_action() -> None:
    cfg = load_preset("default", ["train.stop_at_val=2.5"])
    reason = val_target_note(
        Eval(step=40, train_loss=2.4, val_loss=2.45, train_time_s=1.0), cfg, 40
    )
    reached = notice_for(StateChanged(state="finished", step=40, reason=reason or ""), "tiny")
    assert reached is not None and reached.kind == "target"
    assert reached.title == "cockpit: tiny reached its target"
    assert (
        reached.body
        == "tiny finished at step 40: val loss 2.4500 reached train.stop_at_val 2.5 at step 40"
    )
    acted = action_notice("tiny", 7, "autopilot", "lowered the LR by half")
    assert (acted.kind, acted.title, acted.body) == (
        "action", "cockpit: autopilot acted on tiny", "step 7: lowered the LR by half",
    )  # fmt: skip
    nan = notice_for(Alert(level="error", message="loss is not finite", step=4, code="nan"), "tiny")
    assert nan is not None and (nan.kind, nan.step) == ("nan", 4)


def test_a_stall_is_posted_once_while_the_run_is_running(hooks: Callable[..., Hook]) -> None:
    hook = hooks()
    notes = Notifications(
        [parse_endpoint(hook.url())], preset="tiny", stall=StallWatch(min_s=0.3), stall_check_s=0.05
    )
    notes(StateChanged(state="running", step=0))
    notes(
        Step(
            step=1, loss=2.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1e4, step_time_s=0.01, tokens=64
        )
    )
    ((_, _, body),) = hook.wait_for(1)
    time.sleep(0.3)  # said once per stall
    notes.close(wait_s=5)
    assert len(hook.requests) == 1
    said = json.loads(body)
    assert (said["kind"], said["title"], said["step"]) == ("stall", "cockpit: tiny stalled", 1)
    assert said["body"].startswith("no step for 0 s")


def test_a_real_run_that_finishes_posts_finished_to_the_flag_and_the_file(
    hooks: Callable[..., Hook], config_home: Path, tmp_path: Path
) -> None:
    hook = hooks()
    (config_home / "cockpit" / "notify.toml").write_text(
        f"[[endpoint]]\nurl = '{hook.url('/ntfy-topic')}'\nformat = 'ntfy'\nevents = ['finished']\n"
        f"[[endpoint]]\nurl = '{hook.url('/only-faults')}'\nevents = ['fault']\n",
        encoding="utf-8",
    )
    run_dir = tmp_path / "tiny-run"
    done = cockpit_here(
        "train", "--headless", "--no-telemetry", "--run-dir", str(run_dir),
        *set_args(tiny_overrides("train.max_steps=3", quiet=True)), "--notify", hook.url("/json"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = {path: (headers, body) for path, headers, body in hook.wait_for(2)}
    assert sorted(got) == ["/json", "/ntfy-topic"]  # the faults-only endpoint heard nothing
    said = json.loads(got["/json"][1])
    assert (said["kind"], said["title"], said["body"]) == (
        "finished", "cockpit: default finished", "default finished at step 3",
    )  # fmt: skip
    assert (said["run"], said["preset"], said["step"]) == ("tiny-run", "default", 3)
    assert got["/ntfy-topic"][0]["Title"] == "cockpit: default finished"


def test_a_nan_that_pauses_a_real_run_posts_its_notice(
    hooks: Callable[..., Hook], tmp_path: Path
) -> None:
    hook = hooks()
    notes = Notifications([parse_endpoint(hook.url())])
    cfg = load_preset("default", tiny_overrides("train.max_steps=50", quiet=True))
    trainer = Trainer(cfg, run_dir=tmp_path / "run", telemetry=False, sinks=[notes])

    def on_event(event: object) -> None:
        if isinstance(event, StateChanged) and event.state == "paused":
            trainer.stop(checkpoint=False)

    trainer.sinks.append(on_event)
    trainer.set_up()
    forward = trainer.built.instruments.step.forward
    calls = [0]

    def poisoned(x, y=None):  # noqa: ANN001, ANN202 (the model's forward, wrapped)
        calls[0] += 1
        logits, loss = forward(x, y)
        return logits, loss * float("nan") if calls[0] == 4 else loss

    trainer.built.instruments.step.forward = poisoned
    trainer.run()
    ((_, _, body),) = hook.wait_for(1)
    said = json.loads(body)
    assert (said["kind"], said["title"]) == ("nan", "cockpit: default needs you")
    assert said["body"].startswith("step 3: ") and "not applied" in said["body"]
    assert len(hook.requests) == 1  # the pause and the stop say nothing more


@pytest.mark.parametrize("mode", ["hang", "error"])
def test_an_endpoint_that_hangs_or_fails_neither_slows_nor_stops_the_run_and_is_one_warning(
    mode: str, hooks: Callable[..., Hook], config_home: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    timeout_s, retries = 2.0, 2
    monkeypatch.setattr(notify_senders, "TIMEOUT_S", timeout_s)
    monkeypatch.setattr(notify_senders, "RETRIES", retries)
    monkeypatch.setattr(notify_senders, "BACKOFF_S", 0.01)
    hook = hooks(mode)
    args = train_arguments(
        preset="default", run_dir=str(tmp_path / "run"), no_telemetry=True,
        overrides=tiny_overrides("train.max_steps=120", "train.threads=1", quiet=True),
        notify=[hook.url("/hooks/SECRET-TOKEN")],
    )  # fmt: skip
    trainer = make_trainer(args, interactive=False)
    notes = next(sink for sink in trainer.sinks if isinstance(sink, Notifications))
    events: list[object] = []
    noticed_at: list[float] = []

    def on_event(event: object) -> None:
        events.append(event)
        if isinstance(event, Step) and event.step == 20 and not noticed_at:
            noticed_at.append(time.monotonic())  # an autopilot's action, mid-run
            notes.notify(action_notice("default", 20, "autopilot", "lowered the LR"))

    trainer.sinks.append(on_event)
    assert trainer.run() == "finished"
    after_notice_s = time.monotonic() - noticed_at[0]
    # one blocking post would hold the loop timeout x tries, and the final notice again
    assert after_notice_s < timeout_s * (retries + 1), after_notice_s
    times = {e.step: e.step_time_s for e in events if isinstance(e, Step)}
    before = statistics.median(times[s] for s in range(3, 21))
    after = statistics.median(times[s] for s in range(21, 121))
    assert after < 1.5 * before + 0.002, (before, after)
    warnings = [e.message for e in events if isinstance(e, Alert) and e.code == "notify"]
    warnings += [
        line for line in capsys.readouterr().err.splitlines() if "notifications to" in line
    ]
    assert len(warnings) == 1, warnings
    assert f"notifications to http://127.0.0.1:{hook.server.server_address[1]}/…" in warnings[0]
    assert "SECRET" not in warnings[0]
    if mode == "error":  # said while the run went on: a warning among its alerts, no fault
        assert any(isinstance(e, Alert) and e.code == "notify" for e in events)
        assert "(HTTP 500 Internal Server Error, after 3 tries)" in warnings[0]
        records = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8")
        assert records.count('"code":"notify"') == 1
    assert not any(isinstance(e, Alert) and e.level == "error" for e in events)
    assert hook.requests  # it was tried
    assert os.environ.get("COCKPIT_NOTIFY") is None


def test_a_detached_run_notifies_with_the_url_kept_off_its_command_line(
    hooks: Callable[..., Hook], config_home: Path, tmp_path: Path
) -> None:
    from cockpit.cli.command_line import parse_args
    from cockpit.cli.start import engine_argv

    hook = hooks()
    url = hook.url("/SECRET-TOKEN")
    run_dir = tmp_path / "detached"
    argv = ["start", "--no-telemetry", "--run-dir", str(run_dir), "--no-attach", "--notify", url,
            *set_args(tiny_overrides("train.max_steps=3", quiet=True))]  # fmt: skip
    assert not any(
        "SECRET" in arg for arg in engine_argv(parse_args(argv), run_dir)
    )  # `ps` shows it
    started = cockpit_here(*argv, cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    ((path, _, body),) = hook.wait_for(1, timeout=120)
    assert path == "/SECRET-TOKEN" and json.loads(body)["kind"] == "finished"
    from engine.control.live_runs import find_live_runs

    deadline = time.monotonic() + 30
    while find_live_runs(tmp_path) and time.monotonic() < deadline:  # the engine ends after it
        time.sleep(0.1)
    assert "SECRET" not in (run_dir / "engine.log").read_text(encoding="utf-8")
