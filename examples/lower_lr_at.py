"""Lower a run's learning rate at a given time, e.g. for the night: a control-socket client.

    python examples/lower_lr_at.py RUN_DIR --at 23:00 --factor 0.5

Standard library only: a client needs nothing but the wire protocol. It connects to
RUN_DIR/control.sock, reads the hello and the replay, keeps reading the live stream until the
time comes (a client that stops reading falls behind and is resynchronised), sends scale_lr and
waits for the lr_changed event that acknowledges it. Exit 0: changed; 1: the run refused the
change or ended first; 2: bad arguments or no run in RUN_DIR.
"""

import argparse
import datetime
import json
import socket
import sys
import time
from typing import NoReturn


class Connection:
    """One connection to a run's control socket, read one JSON line at a time."""

    def __init__(self, run_dir: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(f"{run_dir}/control.sock")
        self.buffer = b""

    def send(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self, until: float) -> dict | None:
        """The next message; None once the clock passes `until`; EOFError when the run hangs up."""
        while b"\n" not in self.buffer:
            left = until - time.time()
            if left <= 0:
                return None
            self.sock.settimeout(min(left, 60.0))  # wake now and then: the wall clock may jump
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not chunk:
                raise EOFError
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def fail(message: str, status: int) -> NoReturn:
    print(f"lower_lr_at: {message}", file=sys.stderr)
    sys.exit(status)


def when(text: str) -> float:
    """`now`, or the next HH:MM[:SS] in local time (tomorrow's when today's has passed)."""
    if text == "now":
        return time.time()
    for form in ("%H:%M", "%H:%M:%S"):
        try:
            clock = datetime.datetime.strptime(text, form).time()
            break
        except ValueError:
            continue
    else:
        fail(f"--at {text!r} is not a time; give HH:MM (e.g. 23:00) or now", 2)
    now = datetime.datetime.now()
    at = datetime.datetime.combine(now.date(), clock)
    return (at if at > now else at + datetime.timedelta(days=1)).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description="Multiply a live run's LR by FACTOR at a time.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--at", default="now", help="HH:MM (local time) or now (default)")
    parser.add_argument("--factor", type=float, default=0.5, help="LR multiplier (default 0.5)")
    args = parser.parse_args()
    if not 0 < args.factor < float("inf"):
        fail(f"--factor {args.factor} must be a positive number, e.g. 0.5", 2)
    at = when(args.at)
    try:
        run = Connection(args.run_dir)
    except OSError as e:
        fail(f"no live run answers in {args.run_dir} ({e.strerror or e}); check RUN_DIR", 2)
    run.send({"hello": {"who": "lower_lr_at.py"}})
    try:
        hello = run.read(time.time() + 10)
    except EOFError:
        hello = None
    if not hello or hello.get("kind") != "hello":
        fail(f"the run in {args.run_dir} did not greet: {(hello or {}).get('error')}", 1)
    step, state = hello["summary"]["step"], hello["state"]
    if at > time.time():
        print(f"waiting until {time.ctime(at)}: the run is {state} at step {step}", file=sys.stderr)
    live, sent_at = False, None
    while True:
        try:  # the replay first, then the live stream until the time comes, then the answer
            message = run.read(at if live and sent_at is None else float("inf"))
        except EOFError:  # the run sends its final state, then hangs up
            if sent_at is None:
                fail(f"the run ended ({state}) at step {step} before {args.at}; LR unchanged", 1)
            fail(f"the run ended ({state}) at step {step} before it answered; see metrics.jsonl", 1)
        if message is None:  # the time has come
            sent_at = time.time()  # events after this (same host, same clock) answer it
            run.send({"cmd": "scale_lr", "factor": args.factor, "id": "lower_lr_at"})
            continue
        kind = message.get("kind")
        step = message.get("step", step)
        answer = sent_at is not None and message.get("time", 0) >= sent_at
        if kind in ("live", "resync"):  # after a resync the replay comes again, then live
            live = kind == "live"
        elif kind == "state":
            state = message["state"]
        elif kind == "reply" and not message["ok"]:
            fail(f"the run refused: {message['error']}", 1)
        elif answer and kind == "alert" and message.get("code") == "lr":
            fail(f"the run refused: {message['message']}", 1)
        elif answer and kind == "lr_changed":  # the acknowledgement: the LR from the next step
            old, new, scale = message["old_lr"], message["new_lr"], message["scale"]
            print(f"LR {old:.4g} -> {new:.4g} at step {step} (x{scale:.4g} on the schedule)")
            return


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as e:  # a socket that is not a run's, a lost link
        fail(f"the control socket misbehaved: {e!r}", 1)
