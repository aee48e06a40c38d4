"""Change a live run's settings when it reaches a step: a control-socket client.

    python examples/set_at.py RUN_DIR --step 2000 optim.weight_decay=0.0 train.max_steps=5000
    python examples/set_at.py RUN_DIR schedule.cooldown=0        # cool down now (WSD)

Standard library only: a client needs nothing but the wire protocol. Each KEY=VALUE is spelled
as `--set` spells it, and sent as written: the run reads the value as `--set` reads one. It
connects to RUN_DIR/control.sock, reads the hello and the replay, keeps reading the live stream
until the run has trained STEP steps (at once without --step), sends one `set` and waits for the
settings_changed event that acknowledges it (from this viewer) or the alert that refuses it.
Exit 0: changed (or already so); 1: the run refused the change or ended first; 2: bad arguments
or no run in RUN_DIR.
"""

import argparse
import json
import socket
import sys
import time
from pathlib import Path
from typing import NoReturn

WHO = "set_at.py"


class Connection:
    """One connection to a run's control socket, read one JSON line at a time."""

    def __init__(self, run_dir: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(f"{run_dir}/control.sock")
        self.buffer = b""

    def send(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self, timeout: float | None = None) -> dict | None:
        """The next message; None after `timeout` seconds without one; EOFError at hang-up."""
        self.sock.settimeout(timeout)
        while b"\n" not in self.buffer:
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                return None
            if not chunk:
                raise EOFError
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def fail(message: str, status: int) -> NoReturn:
    print(f"set_at: {message}", file=sys.stderr)
    sys.exit(status)


def settings_of(pairs: list[str]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            fail(f"{pair!r} is not KEY=VALUE; e.g. optim.weight_decay=0.0", 2)
        settings[key.strip()] = value.strip()
    return settings


def show(changes: dict) -> str:
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())


def main() -> None:
    parser = argparse.ArgumentParser(description="Change a live run's settings at a step.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("settings", metavar="KEY=VALUE", nargs="+", help="as --set spells them")
    parser.add_argument("--step", type=int, default=0, help="once the run has trained STEP steps")
    args = parser.parse_args()
    settings = settings_of(args.settings)
    try:
        run = Connection(args.run_dir)
    except OSError as e:
        if Path(args.run_dir, "metrics.jsonl").is_file():  # a run, but nothing listens
            fail(
                f"the run in {args.run_dir} is not live (it finished, stopped or crashed); resume it "
                f"with: cockpit train --resume {args.run_dir} --set KEY=VALUE",
                2,
            )
        fail(f"no live run answers in {args.run_dir} ({e.strerror or e}); check RUN_DIR", 2)
    run.send({"hello": {"who": WHO}})
    try:
        hello = run.read(10.0)
    except EOFError:
        hello = None
    if not hello or hello.get("kind") != "hello":
        fail(f"the run in {args.run_dir} did not greet: {(hello or {}).get('error')}", 1)
    me = f"viewer {hello['viewer']} {WHO}"  # who the run says asked, in its acknowledgement
    step, state = hello["summary"]["step"], hello["state"]
    if step < args.step:
        print(f"waiting for step {args.step}: the run is {state} at step {step}", file=sys.stderr)
    live, sent_at = False, None
    while True:
        try:  # the replay first, then the live stream until the step comes, then the answer
            message = run.read()
        except EOFError:  # the run sends its final state, then hangs up
            if sent_at is None:
                fail(f"the run ended ({state}) at step {step} before step {args.step}; nothing set", 1)
            fail(f"the run ended ({state}) at step {step} before it answered; see metrics.jsonl", 1)
        kind = message.get("kind")
        step = message.get("step", step)
        if kind in ("live", "resync"):  # after a resync the replay comes again, then live
            live = kind == "live"
        elif kind == "state":
            state = message["state"]
        elif kind == "reply" and not message["ok"]:
            fail(f"the run refused: {message['error']}", 1)
        elif sent_at is not None and kind == "alert" and message.get("code") == "set":
            if message.get("time", 0) < sent_at:
                continue  # another's, from before this one was sent
            if message.get("level") == "info":  # taken, but every value was already so
                print(f"set at step {step}: nothing changed ({message['message']})")
                return
            fail(f"the run refused: {message['message']}", 1)
        elif sent_at is not None and kind == "settings_changed" and message.get("by") == me:
            changes = message["changes"]  # the acknowledgement: in force from the next step
            done = show(changes) if changes else "nothing changed: already so"
            print(f"set at step {message['step']}: {done}")
            return
        if live and sent_at is None and step >= args.step:  # the step has come
            sent_at = time.time()  # events after this (same host, same clock) answer it
            run.send({"cmd": "set", "settings": settings, "id": WHO})


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as e:  # a socket that is not a run's, a lost link
        fail(f"the control socket misbehaved: {e!r}", 1)
