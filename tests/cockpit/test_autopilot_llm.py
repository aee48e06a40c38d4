"""`cockpit autopilot RUN_DIR --llm URL --model NAME`: an agent's proposals for one live run, on a
real tiny run in a thread serving its control socket (as test_autopilot_live's: a process of its
own takes 15 s to start on a loaded 2-core machine) and a real chat completions server on
127.0.0.1 answering from a script. What the run takes, what is refused and asked again, what the
journal credits, what a failing endpoint does, and the API key in no file."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from command_here import cockpit_here

pytest.importorskip("openai")

from test_autopilot_live import records_of, start_run  # noqa: E402
from test_llm_proposer import KEY, ChatServer  # noqa: E402

from cockpit.research.live_agent import (  # noqa: E402
    RunWatch,
    check_reply,
    live_keys,
    live_prompt,
    parse_live_keys,
)
from engine.config import ConfigError, load_preset  # noqa: E402
from engine.rundir.journal import read_journal  # noqa: E402

TIMEOUT = 60.0
KEY_ENV = "COCKPIT_TEST_LLM_KEY"
WHO = "autopilot (llm scripted)"


class Run:
    """A tiny WSD run (LR 3e-3, an evaluation every 3 steps) training in a thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.run_dir = tmp_path / "run"
        self.trainer, self.thread = start_run(self.run_dir)

    def records(self, kind: str) -> list[dict]:
        return [r for r in records_of(self.run_dir) if r["kind"] == kind]

    def step(self) -> int:
        return self.trainer.step

    def close(self) -> None:
        self.trainer.stop(checkpoint=False)
        self.thread.join(TIMEOUT)


def autopilot_until(run: Run, done: threading.Event, *args: str) -> object:
    """`cockpit autopilot RUN_DIR ARGS` here, stopped by SIGTERM (as `kill` sends it) once
    `done` is set (or after TIMEOUT) and the autopilot has attached."""

    def stop_when_done() -> None:
        done.wait(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not [
            r for r in run.records("viewer") if WHO in r["who"]
        ]:
            time.sleep(0.05)  # its signal handlers are in place once it has attached
        time.sleep(0.3)  # the autopilot says what it saw last
        os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_when_done, daemon=True)
    stopper.start()
    try:
        return cockpit_here("autopilot", str(run.run_dir), *args, env={**os.environ, KEY_ENV: KEY})
    finally:
        done.set()
        stopper.join(TIMEOUT)


def test_a_proposed_lr_is_set_journaled_as_the_agents_a_non_live_key_asked_again_none_nothing(
    tmp_path: Path,
) -> None:
    nones = ['{"action": "none", "reason": "the loss still falls"}'] * 20
    server = ChatServer([
        '{"action": "set", "settings": {"optim.name": "sgd"}, "reason": "try SGD"}',
        '```json\n{"action": "set", "settings": {"lr": 0.0015}, "reason": "val flattened"}\n```',
        *nones,
    ])  # fmt: skip
    run = Run(tmp_path)
    done = threading.Event()

    def done_after_a_none() -> None:  # the set taken, then a round that saw it answered
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not run.records("settings_changed"):
            time.sleep(0.05)
        asked = len(server.requests)
        while time.monotonic() < deadline and len(server.requests) < asked + 1:
            time.sleep(0.05)
        done.set()

    threading.Thread(target=done_after_a_none, daemon=True).start()
    try:
        result = autopilot_until(
            run, done, "--llm", server.url, "--model", "scripted", "--llm-key-env", KEY_ENV,
            "--auto",
        )  # fmt: skip
        records = run.records("settings_changed")
    finally:
        run.close()
        server.close()
    assert result.returncode == 0, result.stderr
    out = result.stdout
    lines = out.splitlines()
    assert lines[0] == (
        f"autopilot: watching {run.run_dir} with proposals from scripted at {server.url} "
        "(applied unattended)"
    )
    # the non-live key: refused in one line, and the agent asked again with why
    refused = [line for line in lines if ": the reply was refused (1 of 3): " in line]
    assert len(refused) == 1, out
    assert "optim.name cannot change while the run trains" in refused[0]
    assert refused[0].endswith("; asking again")
    again = server.requests[1]["messages"]
    assert again[-1]["content"].startswith("That was refused: optim.name cannot change")
    # the LR: applied through the run's own `set`, credited to the agent
    assert any(
        line.endswith("llm scripted: val flattened; doing: set optim.lr=0.0015 "
                      "(optim.lr 0.003 -> 0.0015)")
        for line in lines
    ), out  # fmt: skip
    assert any(": the run took it: optim.lr 0.003 -> 0.0015" in line for line in lines), out
    (changed,) = records  # `none` changed nothing
    assert changed["by"].endswith(WHO) and changed["changes"] == {"optim.lr": [0.003, 0.0015]}
    entries = [e for e in read_journal(run.run_dir / "metrics.jsonl") if WHO in e.who]
    assert [e.what for e in entries][:2] == ["attached", "set optim.lr 0.003 -> 0.0015"]
    assert "llm scripted: the loss still falls; does nothing" in out
    # what the agent was shown: the run's state and the live settings it may set, no others
    shown = server.requests[0]["messages"][1]["content"]
    assert "Step " in shown and "Evaluations, oldest first:" in shown
    assert "LR schedule: wsd, peak optim.lr 0.003" in shown
    assert "- optim.lr = 0.003 (number, > 0, <= 10): peak learning rate" in shown
    assert "- schedule.cooldown (integer, >= 0): cool down now" in shown
    assert "optim.name =" not in shown and "train.max_steps =" not in shown
    last = server.requests[-1]["messages"][1]["content"]
    assert f"{WHO}: set optim.lr 0.003 -> 0.0015" in last  # the journal: its own action
    # the key: sent in the header alone, in no file written, nor said
    assert all(h["authorization"] == f"Bearer {KEY}" for h in server.headers)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 3 and not [p for p in written if KEY.encode() in p.read_bytes()]
    assert KEY not in out + result.stderr


@pytest.mark.slow  # the client retries each 500 with its back-off
def test_a_failing_endpoint_is_one_warning_and_the_rules_beside_it_go_on(tmp_path: Path) -> None:
    rules = tmp_path / "night.toml"
    rules.write_text('[[rule]]\nwhen = "at"\nstep = 6\ndo = "checkpoint"\n')
    server = ChatServer([("status", 500)] * 30)
    run = Run(tmp_path)
    done = threading.Event()

    def done_after_two_rounds() -> None:  # each round: a request and the client's 2 retries
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(server.requests) < 6:
            time.sleep(0.05)
        done.set()

    threading.Thread(target=done_after_two_rounds, daemon=True).start()
    try:
        result = autopilot_until(
            run, done, "--rules", str(rules), "--llm", server.url, "--model", "scripted",
            "--llm-key-env", KEY_ENV, "--auto", "--llm-timeout", "5",
        )  # fmt: skip
        step = run.step()
        time.sleep(0.5)
        steps_went_on = run.step() > step
        changed, checkpoints = run.records("settings_changed"), run.records("checkpoint")
    finally:
        run.close()
        server.close()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"autopilot: watching {run.run_dir} with 1 rules from {rules}"
    assert lines[1].startswith(f"autopilot: watching {run.run_dir} with proposals from scripted")
    (warning,) = [line for line in lines if "warning" in line]
    assert warning.startswith(f"autopilot: warning: the agent: {server.url} answered HTTP 500: ")
    assert warning.endswith(
        "server trouble; no action, the run goes on untouched (asked again at the next round)"
    )
    assert len(server.requests) >= 6  # two rounds, one warning
    # the rules acted as their own viewer; the agent changed nothing; the run trains on
    assert steps_went_on and changed == [] and [c["reason"] for c in checkpoints] == ["manual"]
    credited = {
        e.who for e in read_journal(run.run_dir / "metrics.jsonl") if e.what == "checkpoint"
    }
    assert credited == {f"viewer 1 autopilot (rules {rules})"}
    assert lines[-1] == "autopilot: stopped; the run goes on"


@pytest.mark.slow  # each answer awaited to its timeout, with the client's back-off
def test_a_slow_endpoint_is_one_warning_then_a_dry_run_only_says_what_it_would_do(
    tmp_path: Path,
) -> None:
    halve = '{"action": "set", "settings": {"optim.lr": 0.0015}, "reason": "halve it"}'
    server = ChatServer([("slow", 1.0, halve)] * 3 + [halve] * 20)  # no --auto, no terminal
    run = Run(tmp_path)
    done = threading.Event()

    def done_after_an_answer() -> None:  # the slow round (3 requests), then one answered
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(server.requests) < 4:
            time.sleep(0.05)
        done.set()

    threading.Thread(target=done_after_an_answer, daemon=True).start()
    try:
        result = autopilot_until(
            run, done, "--llm", server.url, "--model", "scripted", "--llm-timeout", "0.3",
            "--dry-run",
        )  # fmt: skip
        changed = run.records("settings_changed")
    finally:
        run.close()
        server.close()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("(only printed) (dry run: nothing is sent)")
    assert lines[1] == (
        f"autopilot: warning: the agent: {server.url} gave no answer within 0.3s; no action, the "
        "run goes on untouched (asked again at the next round)"
    )
    assert lines[2] == f"autopilot: the agent at {server.url} answers again"
    assert lines[3].endswith(
        ": llm scripted: halve it; would do: set optim.lr=0.0015 (optim.lr 0.003 -> 0.0015)"
    )
    assert changed == []


U = "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "say what acts on the run: --rules FILE, --llm URL --model NAME, or both"),
        (["--model", "m"], "--model: only with --llm URL"),
        (["--llm", U], "--llm needs --model NAME"),
        (["--llm", U, "--model", "m"],
         "--llm: each proposal is asked on this terminal and stdin is none; add --auto"),
        (["--llm", U, "--model", "m", "--auto", "--every", "0"], "--every 0: a number of evaluations"),
        (["--llm", U, "--model", "m", "--auto", "--keys", "optim.name"],
         "--keys: optim.name cannot change while the run trains"),
        (["--llm", U, "--model", "m", "--auto", "--keys", "optim.lrr"],
         "--keys: unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
        (["--llm", "127.0.0.1:9", "--model", "m", "--auto"], "expected an http(s) URL"),
    ],
)  # fmt: skip
def test_bad_agent_options_are_one_line_and_exit_2(tmp_path: Path, args: list, says: str) -> None:
    done = cockpit_here("autopilot", str(tmp_path), *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("cockpit autopilot: ") and says in done.stderr, done.stderr


def watched(*overrides: str) -> RunWatch:
    from engine.events import CheckpointSaved, Eval, RunStarted, Step

    cfg = load_preset("tiny", ["schedule.kind=wsd", "optim.lr=3e-3", *overrides])
    watch = RunWatch()
    watch.observe(RunStarted(
        run_dir="r", preset="tiny", description="", config=cfg.to_dict(), device="cpu",
        dtype="float32", n_params=1, n_params_non_embedding=1, vocab_size=65, tokenizer="char",
        train_tokens=1, val_tokens=1, start_step=0, max_steps=cfg.train.max_steps,
        tokens_per_step=64, planned_lr=((0, 0.0), (100, 3e-3)),
    ))  # fmt: skip
    for step in range(1, 41):
        watch.observe(Step(step=step, loss=3.0 - step / 100, lr=3e-3, grad_norm=1.0,
                           tokens_per_s=1.0, step_time_s=0.01, tokens=64 * step))  # fmt: skip
        if step % 10 == 0:
            watch.observe(Eval(step=step, train_loss=2.9, val_loss=2.5 + step / 1000,
                               train_time_s=1.0))  # fmt: skip
    watch.observe(CheckpointSaved(step=20, path="ckpt", reason="manual"))
    return watch


def check(text: str, watch: RunWatch, keys: list[str] | None = None) -> object:
    assert watch.config is not None
    return check_reply(text, watch.config, watch.step, keys or live_keys(), checkpoint=True)


def test_replies_are_checked_against_the_running_config_in_one_line_each() -> None:
    watch = watched()
    assert check('{"action": "none", "reason": "fine"}', watch).action == "none"
    taken = check('{"action": "rollback", "lr_factor": 0.5, "reason": "spike"}', watch)
    assert (taken.action, taken.text) == ("rollback", "rollback 0.5")
    cooled = check('{"action": "set", "settings": {"schedule.cooldown": 20}}', watch)
    assert cooled.changes.startswith("schedule.decay_start 0 -> 40, train.max_steps ")
    problems = [
        check(text, watch)
        for text in (
            "lower the LR",
            '{"action": "restart"}',
            '{"action": "set", "settings": {"optim.lrr": 1}}',
            '{"action": "set", "settings": {"train.max_steps": 10000}}',
            '{"action": "set", "settings": {"train.log_every": 5}}',
            '{"action": "set", "settings": {"optim.lr": 50}}',
            '{"action": "set", "settings": {"optim.lr": 0.003}}',
            '{"action": "rollback", "lr_factor": 2}',
            '{"action": "set", "settings": {"optim.muon_lr": 0.01}}',
        )
    ]
    assert all(isinstance(p, str) and "\n" not in p for p in problems), problems
    assert problems[0].startswith("not valid JSON")
    assert problems[1] == '"action": "restart": expected one of set, checkpoint, rollback, none'
    assert problems[2].startswith("unknown key 'optim.lrr' (did you mean 'optim.lr'?)")
    assert problems[3] == (
        "train.max_steps is not a setting it may change (the run's length and budget are the "
        "person's; --keys may name it)"
    )
    assert problems[4].startswith("train.log_every is not a setting it may change (it sets how")
    assert "optim.lr" in problems[5] and "10" in problems[5]
    assert problems[6] == "optim.lr=0.003: changes nothing, the run has it already"
    assert problems[7] == "rollback: lr_factor 2: expected a number in (0, 1]"
    assert problems[8].startswith("optim.muon_lr changes nothing on this run")
    named = check('{"action": "set", "settings": {"train.max_steps": 10000}}', watch,
                  parse_live_keys("max_steps"))  # fmt: skip
    assert named.settings == {"train.max_steps": 10000}
    assert check('{"action": "rollback"}', watch, None) is not None
    assert check_reply('{"action": "rollback"}', watch.config, 40, live_keys(), False) == (
        "rollback: the run has no checkpoint yet to go back to; checkpoint first"
    )


def test_the_prompt_shows_the_runs_state_and_the_notes() -> None:
    watch = watched()
    system, user = live_prompt("# Watch", watch, ["optim.lr", "schedule.cooldown"],
                               ["- step 20: viewer 1 me: checkpoint"], ["not below 1e-3"])  # fmt: skip
    assert system == {"role": "system", "content": "# Watch"}
    text = user["content"]
    assert "Step 40 of " in text and "2,560 tokens trained" in text
    assert "- steps 1-5: " in text and "- the last 20 steps: mean " in text
    assert "- step 40: train 2.9000, val 2.5400" in text
    assert "Best val loss 2.5100 at step 10; 3 evaluations since" in text
    assert "Newest checkpoint: at step 20" in text
    assert "- step 20: viewer 1 me: checkpoint" in text
    assert "- optim.lr = 0.003 (number, > 0, <= 10): peak learning rate" in text
    assert "- not below 1e-3" in text
    assert '{"action": "none", "reason": "why"}' in text
    with pytest.raises(ConfigError, match="name at least one key"):
        parse_live_keys(",")


def test_refused_replies_are_asked_again_a_bounded_number_of_times() -> None:
    from cockpit.research.live_agent import consult

    watch = watched()
    asked: list[list] = []
    said: list[str] = []

    def ask(messages: list) -> str:
        asked.append(messages)
        return json.dumps({"action": "set", "settings": {"model.n_layer": 3}})

    outcome = consult(ask, [{"role": "user", "content": "state"}], watch.config, 40,
                      live_keys(), True, said.append)  # fmt: skip
    assert outcome.action is None and outcome.failure == ""
    assert len(asked) == 3 and len(said) == 3
    assert said[0].startswith("step 40: the reply was refused (1 of 3): model.n_layer cannot")
    assert said[-1].endswith("; no action this time")
    assert len(asked[-1]) == 5  # the state, then each refused reply and why


@pytest.mark.slow  # a process of its own: its stdin a terminal
def test_on_a_terminal_each_proposal_is_asked_no_with_a_note_edit_and_yes(tmp_path: Path) -> None:
    """A real `cockpit autopilot` process whose stdin is a terminal (a pty): the person rejects
    a proposal with a note the agent hears next, edits the next, accepts a checkpoint."""
    import pty
    import subprocess
    import sys

    server = ChatServer([
        '{"action": "set", "settings": {"optim.lr": 0.0015}, "reason": "halve it"}',
        '{"action": "set", "settings": {"optim.lr": 0.002}, "reason": "a smaller step"}',
        '{"action": "checkpoint", "reason": "keep this point"}',
        *['{"action": "none", "reason": "fine"}'] * 20,
    ])  # fmt: skip
    run = Run(tmp_path)
    leader, follower = pty.openpty()
    argv = [sys.executable, "-m", "cockpit", "autopilot", str(run.run_dir), "--llm", server.url,
            "--model", "scripted", "--llm-key-env", KEY_ENV]  # fmt: skip
    env = {**os.environ, KEY_ENV: KEY, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen(
        argv, stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True
    )
    os.close(follower)
    said: list[str] = []

    def until(text: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            assert process.stdout is not None
            line = process.stdout.readline()
            said.append(line.rstrip("\n"))
            if text in line or not line:
                return
        raise AssertionError(f"no {text!r} in {said}")

    try:
        until("apply it?")
        os.write(leader, b"n too big a cut\n")
        until("apply it?")
        os.write(leader, b"e\n")
        until("the action instead")
        os.write(leader, b"set optim.lr=0.0025\n")
        until("the run took it")
        until("apply it?")
        os.write(leader, b"y\n")
        until("doing: checkpoint")
        deadline = time.monotonic() + TIMEOUT
        while not run.records("checkpoint") and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=TIMEOUT)
        said += out.splitlines()
        changed, checkpoints = run.records("settings_changed"), run.records("checkpoint")
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
        run.close()
        server.close()
    text = "\n".join(said)
    assert process.returncode == 0, text
    assert (
        "llm scripted: halve it; proposes: set optim.lr=0.0015 (optim.lr 0.003 -> 0.0015)" in text
    )
    assert "rejected: the agent hears your note next time" in text
    # the note, in the next round's prompt
    assert "- set optim.lr=0.0015: too big a cut" in server.requests[1]["messages"][1]["content"]
    assert "doing: set optim.lr=0.0025" in text
    assert [(c["by"].endswith(WHO), c["changes"]) for c in changed] == [
        (True, {"optim.lr": [0.003, 0.0025]})
    ]
    assert [c["reason"] for c in checkpoints] == ["manual"]
    assert text.splitlines()[-1] == "autopilot: stopped; the run goes on"
