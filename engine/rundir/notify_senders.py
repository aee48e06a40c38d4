"""Notices posted to endpoints, from the engine (it runs when no one is attached), off the
training thread: `Notifications` is a run's sink; it decides on each event with the shared
rules (engine.rundir.notices) and queues what deserves a notice for each endpoint's own sender
thread, which posts it with a timeout and a few retries with backoff. A failing or hanging
endpoint is one warning for the run, never a slowed or failed run; a queue that fills drops its
oldest notice (the count said once)."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

from engine.events import Event, RunStarted, RunState, StateChanged, Step
from engine.rundir.notices import FAULT_CODES, Notice, StallWatch, notice_for
from engine.rundir.notify_endpoints import Endpoint

TIMEOUT_S = 5.0  # one POST's limit
RETRIES = 2  # tries after the first
BACKOFF_S = 1.0  # the wait before the first retry, doubled before each next
CAPACITY = 32  # notices waiting for one endpoint
STALL_CHECK_S = 5.0  # how often the stall rule is looked at
DISCORD_LIMIT = 2000  # characters of a Discord message
_URGENT = (RunState.FAILED, "stall", *FAULT_CODES)
NTFY_HIGH, NTFY_NORMAL = "4", "3"  # ntfy's priorities (1-5): "high" and its default


def _latin1(text: str) -> str:
    """A header value: one line of latin-1 (http.client's encoding for headers)."""
    line = " ".join(text.split())
    return line.encode("latin-1", "replace").decode("latin-1")


def request_for(
    endpoint: Endpoint, notice: Notice, run: str, preset: str, when: float
) -> urllib.request.Request:
    """The POST that carries `notice` to `endpoint` in its format; `run` is the run directory's
    name, `when` the time of the event (seconds since the epoch)."""
    headers = {"User-Agent": "cockpit"}
    if endpoint.format == "ntfy":
        body = notice.body.encode("utf-8")
        headers |= {
            "Content-Type": "text/plain; charset=utf-8",
            "Title": _latin1(notice.title),
            "Tags": f"cockpit,{notice.kind}" if notice.kind else "cockpit",
            "Priority": NTFY_HIGH if notice.kind in _URGENT else NTFY_NORMAL,
        }
    else:
        if endpoint.format == "slack":
            payload: dict[str, object] = {"text": f"*{notice.title}*\n{notice.body}"}
        elif endpoint.format == "discord":
            payload = {"content": f"**{notice.title}**\n{notice.body}"[:DISCORD_LIMIT]}
        else:
            stamp = datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")
            payload = {
                "title": notice.title,
                "body": notice.body,
                "kind": notice.kind,
                "run": run,
                "preset": preset,
                "step": notice.step,
                "time": stamp,
            }
        body = json.dumps(payload).encode("utf-8")
        headers["Content-Type"] = "application/json"
    return urllib.request.Request(endpoint.url, data=body, headers=headers, method="POST")


class _Sender:
    """One endpoint's thread: posts what its bounded queue holds, in order."""

    def __init__(
        self, endpoint: Endpoint, warn: Callable[[str], None], timeout_s: float,
        retries: int, backoff_s: float, capacity: int,
    ) -> None:  # fmt: skip
        self.endpoint = endpoint
        self.warn = warn
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.queue: queue.Queue[urllib.request.Request | None] = queue.Queue(maxsize=capacity)
        self.closing = threading.Event()
        self.failing = False  # the last notice could not be sent
        self.warned = False  # a failure was said (once a run)
        self.dropped = 0
        self.sent = 0
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._drain, name="notify-sender", daemon=True)
        self.thread.start()

    def put(self, request: urllib.request.Request) -> None:
        """Queue `request` (any thread, never blocks): a full queue drops its oldest."""
        with self._lock:
            while True:
                try:
                    self.queue.put_nowait(request)
                    return
                except queue.Full:
                    try:
                        self.queue.get_nowait()
                        self.dropped += 1
                    except queue.Empty:
                        pass

    def _drain(self) -> None:
        while True:
            request = self.queue.get()
            if request is None:
                return
            try:
                self._send(request)
            except Exception as e:  # the thread's boundary: a sender never takes the run down
                self._failed(f"{type(e).__name__}: {e}")

    def _send(self, request: urllib.request.Request) -> None:
        why, tries = "", 0
        for attempt in range(self.retries + 1):
            if attempt and self.closing.wait(self.backoff_s * 2 ** (attempt - 1)):
                break  # the run has ended: no more waiting between tries
            why = self._post(request)
            tries += 1
            if not why:
                self.failing = False
                self.sent += 1
                return
            if why.startswith("HTTP 4") and not why.startswith("HTTP 429"):
                break  # refused: trying again would be refused again
        self._failed(f"{why}, after {tries} {'try' if tries == 1 else 'tries'}")

    def _post(self, request: urllib.request.Request) -> str:
        """'' when the endpoint took the notice; else why not, in a few words."""
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read(1024)
            return ""
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code} {e.reason}"
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, TimeoutError):
                return f"no answer within {self.timeout_s:g} s"
            return str(getattr(reason, "strerror", None) or reason)
        except TimeoutError:
            return f"no answer within {self.timeout_s:g} s"
        except OSError as e:  # a connection reset mid-answer
            return e.strerror or type(e).__name__

    def _failed(self, why: str) -> None:
        self.failing = True
        if not self.warned:
            self.warned = True
            self.warn(
                f"notifications to {self.endpoint.shown} failed ({why}); the run goes on "
                "and later notices are still tried"
            )


class Notifications:
    """A run's notifications to `endpoints`: a sink (called with every event, on the training
    thread: it only decides and queues) and `notify` for a notice from elsewhere (an autopilot
    or agent that acted: engine.rundir.notices.action_notice). `warn` says a problem in one
    line (the run records it as a warning, not a fault)."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        warn: Callable[[str], None] | None = None,
        *,
        preset: str = "",
        run: str = "",
        timeout_s: float | None = None,
        retries: int | None = None,
        backoff_s: float | None = None,
        capacity: int = CAPACITY,
        close_wait_s: float | None = None,
        stall: StallWatch | None = None,
        stall_check_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # None: the module's defaults, as they are when the run starts
        timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
        retries = RETRIES if retries is None else retries
        backoff_s = BACKOFF_S if backoff_s is None else backoff_s
        stall_check_s = STALL_CHECK_S if stall_check_s is None else stall_check_s
        self.warn = warn or (lambda message: None)
        self.preset = preset
        self.run = run
        self.close_wait_s = timeout_s if close_wait_s is None else close_wait_s
        self.clock = clock
        self.state: str = RunState.STARTING
        self.stall = stall or StallWatch()
        self.sent_notices: list[Notice] = []  # what was decided and queued, for the record
        self._lock = threading.Lock()  # the stall watch: fed here, checked by its thread
        self._closed = threading.Event()
        self._senders = [
            _Sender(e, self._warn, timeout_s, retries, backoff_s, capacity) for e in endpoints
        ]
        self._watch = threading.Thread(
            target=self._watch_stalls, args=(stall_check_s,), name="notify-stall", daemon=True
        )
        if self._senders:
            self._watch.start()

    def _warn(self, message: str) -> None:
        self.warn(message)

    def __call__(self, event: Event) -> None:
        if not self._senders or self._closed.is_set():
            return
        if isinstance(event, Step):
            with self._lock:
                self.stall.step(event, self.clock())
            return
        if isinstance(event, RunStarted):
            self.preset = event.preset or self.preset
            self.run = Path(event.run_dir).name or self.run
        elif isinstance(event, StateChanged):
            with self._lock:
                self.state = event.state
                self.stall.reset(self.clock())
        notice = notice_for(event, self.preset)
        if notice is not None:
            self.notify(notice, event.time)

    def notify(self, notice: Notice, when: float | None = None) -> None:
        """Send `notice` to every endpoint that wants its kind (any thread, never blocks)."""
        if self._closed.is_set():
            return
        self.sent_notices.append(notice)
        when = time.time() if when is None else when
        for sender in self._senders:
            if sender.endpoint.wants(notice.kind):
                sender.put(request_for(sender.endpoint, notice, self.run, self.preset, when))

    def _watch_stalls(self, every_s: float) -> None:
        while not self._closed.wait(every_s):
            with self._lock:
                notice = self.stall.check(self.clock(), self.state, self.preset)
            if notice is not None:
                self.notify(notice)

    def close(self, wait_s: float | None = None) -> None:
        """Send what is queued, waiting at most `wait_s` (default: one POST's timeout; none for
        an endpoint already failing): what is left is said in one warning, unless that
        endpoint's failure was said already. The sender threads are daemons: one stuck on a
        hanging endpoint is left behind."""
        if self._closed.is_set():
            return
        self._closed.set()
        wait_s = self.close_wait_s if wait_s is None else wait_s
        deadline = time.monotonic() + wait_s
        for sender in self._senders:
            sender.closing.set()
            sender.put(None)  # type: ignore[arg-type]  # after what is queued
        for sender in self._senders:
            if not sender.failing:
                sender.thread.join(max(0.0, deadline - time.monotonic()))
            if sender.thread.is_alive() and not sender.warned:
                sender.warned = True
                self._warn(
                    f"notifications to {sender.endpoint.shown}: not all sent within "
                    f"{wait_s:g} s of the run's end (the endpoint did not answer)"
                )
            if sender.dropped:
                self._warn(
                    f"notifications to {sender.endpoint.shown}: {sender.dropped} dropped "
                    "(the endpoint fell behind)"
                )
