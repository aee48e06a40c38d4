"""The run's Prometheus endpoint (`log.metrics_port`): its live figures in Prometheus's text
format on 127.0.0.1:PORT/metrics, for a scrape that sends the run's token.

A sink beside metrics.jsonl: the training thread only keeps the newest event of each kind (a
dict assignment, and the loss's moving average on a step); the figures are made from them when
Prometheus asks, on the server's own thread. Read-only: nothing it serves changes the run.
"""

from __future__ import annotations

import errno
import hmac
import math
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from engine.config.run_config import ConfigError
from engine.events import Event, RunState
from engine.files import PRIVATE_MODE, atomic_write_text

HOST = "127.0.0.1"  # never another interface: reach it from elsewhere through `ssh -L`
TOKEN_NAME = "metrics.token"  # in the run directory, 0600: what a scrape must send
TOKEN_PARAM = "token"  # the query parameter that may carry it instead of the header
EMA_BETA = 0.9  # the loss panel's default smoothing, debiased as it is
PREFIX = "cockpit_"
MISSING_PACKAGE = (
    "log.metrics_port: the prometheus_client package is not installed; "
    "pip install 'cockpit[metrics]' or drop --metrics-port"
)
STATES = (
    RunState.STARTING, RunState.RUNNING, RunState.PAUSED, RunState.SAVING,
    RunState.STOPPED, RunState.FINISHED, RunState.FAILED,
)  # fmt: skip
MEMORY_CATEGORIES = ("weights", "gradients", "optimizer", "activations", "cache", "other")
# (name, help, DeviceReading field, unit): each GPU's reading, labelled with its index
GPU_FIGURES = (
    ("gpu_utilisation_percent", "GPU utilisation", "util_percent", ""),
    ("gpu_memory_used", "GPU memory in use", "mem_used", "bytes"),
    ("gpu_process_memory", "this run's GPU memory", "process_mem", "bytes"),
    ("gpu_process_utilisation_percent", "this run's SM utilisation", "process_util_percent", ""),
    ("gpu_temperature_celsius", "GPU temperature", "temperature_c", ""),
    ("gpu_power_watts", "GPU power draw", "power_w", ""),
)
_KEPT = frozenset({"run_started", "step", "eval", "memory", "telemetry", "state"})


def check_prometheus_client() -> None:
    """ConfigError (one line naming the extra) when prometheus_client cannot be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(MISSING_PACKAGE) from None


def port_in_use(port: int) -> str:
    """The one line refusing a port another program listens on."""
    return (
        f"log.metrics_port: port {port} on {HOST} is in use by another program; "
        f"choose another port: --metrics-port N (or --set log.metrics_port=N)"
    )


def port_refusal(port: int, error: OSError) -> str:
    """The one line saying why `port` cannot be listened on (`error`: what bind raised)."""
    if error.errno == errno.EADDRINUSE:
        return port_in_use(port)
    if error.errno == errno.EACCES:
        return (
            f"log.metrics_port: port {port} needs privileges this user lacks (ports below 1024 "
            f"do); choose a port from 1024 to 65535: --metrics-port N"
        )
    return (
        f"log.metrics_port: cannot listen on {HOST}:{port} ({error.strerror or error}); "
        f"choose another port: --metrics-port N"
    )


def check_port_free(port: int) -> None:
    """ConfigError (one line) when `port` on 127.0.0.1 cannot be listened on now."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the endpoint binds it
    try:
        probe.bind((HOST, port))
    except OSError as e:
        raise ConfigError(port_refusal(port, e)) from None
    finally:
        probe.close()


def check_metrics_port(port: int) -> None:
    """Before a run starts: the package is there and the port is free (0: nothing to check)."""
    if port:
        check_prometheus_client()
        check_port_free(port)


class LatestEvents:
    """The newest event of each kind the endpoint serves, and the loss's debiased moving
    average. Called on the training thread: it keeps, never computes a figure."""

    def __init__(self) -> None:
        self.latest: dict[str, Event] = {}
        self._ema = 0.0
        self._ema_weight = 0.0  # the bias correction's 1 - beta**n
        self.loss_ema: float | None = None

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind not in _KEPT:
            return
        self.latest[kind] = event  # one assignment: a scrape reads a whole event or the one before
        if kind == "step":
            loss = event.loss  # type: ignore[attr-defined]
            if math.isfinite(loss):  # a NaN must not poison the average for good
                self._ema = EMA_BETA * self._ema + (1 - EMA_BETA) * loss
                self._ema_weight = EMA_BETA * self._ema_weight + (1 - EMA_BETA)
                self.loss_ema = self._ema / self._ema_weight


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


class RunCollector:
    """A prometheus_client collector: the run's figures made from `LatestEvents` at each
    scrape, each labelled with the run's name and preset. A figure the run has not yet
    reported (no evaluation yet, no GPU) is left out rather than served as 0."""

    def __init__(self, latest: LatestEvents, run: str, preset: str) -> None:
        self.latest = latest
        self.labels = {"run": run, "preset": preset}

    def describe(self) -> list[Any]:
        return []  # made at each scrape: nothing to check when registered

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily, StateSetMetricFamily

        names, values = list(self.labels), list(self.labels.values())
        latest = dict(self.latest.latest)  # a copy: the training thread may replace entries

        def gauge(name: str, doc: str, value: float | None, unit: str = "") -> Iterator[Any]:
            if _finite(value):
                family = GaugeMetricFamily(PREFIX + name, doc, labels=names, unit=unit)
                family.add_metric(values, float(value))  # type: ignore[arg-type]
                yield family

        def by(
            name: str, doc: str, label: str, rows: Iterable[tuple[str, Any]], unit: str = ""
        ) -> Iterator[Any]:
            family = GaugeMetricFamily(PREFIX + name, doc, labels=[*names, label], unit=unit)
            for key, value in rows:
                if _finite(value):
                    family.add_metric([*values, key], float(value))
            if family.samples:
                yield family

        state = latest.get("state")
        current = state.state if state is not None else RunState.STARTING  # type: ignore[attr-defined]
        states = StateSetMetricFamily(PREFIX + "state", "the run's state", labels=names)
        states.add_metric(values, {name: name == current for name in STATES})
        yield states

        step = latest.get("step")
        if step is not None:
            s: Any = step
            yield from gauge("step", "optimizer steps completed", s.step)
            yield from gauge("tokens", "tokens trained on so far", s.tokens)
            yield from gauge("train_loss", "the newest step's training loss", s.loss)
            yield from gauge(
                "train_loss_ema",
                f"the training loss's debiased moving average (beta {EMA_BETA})",
                self.latest.loss_ema,
            )
            yield from gauge("learning_rate", "the newest step's learning rate", s.lr)
            yield from gauge("tokens_per_second", "training throughput", s.tokens_per_s)
            yield from gauge("mfu_ratio", "model FLOPs utilisation, 0..1", s.mfu)
            yield from gauge("grad_norm", "the newest step's gradient norm", s.grad_norm)
            yield from gauge("step_time_seconds", "wall time of the newest step", s.step_time_s)

        ev = latest.get("eval")
        if ev is not None:
            e: Any = ev
            yield from gauge("eval_step", "the step of the newest evaluation", e.step)
            yield from gauge("val_loss", "the newest evaluation's validation loss", e.val_loss)
            yield from gauge(
                "val_bpb", "the newest evaluation's validation bits per byte", e.val_bpb
            )
            yield from gauge(
                "eval_train_loss", "the newest evaluation's training loss", e.train_loss
            )

        memory = latest.get("memory")
        if memory is not None:
            m: Any = memory
            rows = [(name, getattr(m, name)) for name in MEMORY_CATEGORIES]
            yield from by(
                "memory", f"memory on {m.device} by category", "category", rows, unit="bytes"
            )
            yield from gauge(
                "memory_capacity", "the device's memory (RAM on CPU)", m.capacity, unit="bytes"
            )

        telemetry = latest.get("telemetry")
        if telemetry is not None:
            t: Any = telemetry
            yield from gauge("cpu_percent", "the machine's CPU utilisation", t.cpu_percent)
            yield from gauge(
                "process_cpu_percent", "the run's process (100 = one core)", t.process_cpu_percent
            )
            yield from gauge("ram_used", "the machine's RAM in use", t.ram_used, unit="bytes")
            yield from gauge(
                "process_rss", "the run's resident memory", t.process_rss, unit="bytes"
            )
            for name, doc, field, unit in GPU_FIGURES:
                rows = [(str(g.index), getattr(g, field)) for g in t.gpus]
                yield from by(name, doc, "gpu", rows, unit=unit)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a line per scrape would fill a headless run's output


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds the run's exit
    # a port left in TIME_WAIT by the run before (a resume just after a stop) is free to take;
    # one another program listens on is refused all the same
    allow_reuse_address = True


def token_guard(app: Callable[..., Any], token: str) -> Callable[..., Any]:
    """`app` behind the token: as `Authorization: Bearer TOKEN` or `?token=TOKEN`; without
    one, 401; with another, 403."""
    expected = token.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scheme, _, credentials = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        given = credentials.strip() if scheme.lower() == "bearer" else None
        if given is None:
            given = (parse_qs(environ.get("QUERY_STRING", "")).get(TOKEN_PARAM) or [None])[0]
        if given is None:
            status, body = (
                "401 Unauthorized",
                b"a token is needed: Authorization: Bearer TOKEN (RUN_DIR/metrics.token)\n",
            )
        elif not hmac.compare_digest(given.encode(), expected):
            status, body = "403 Forbidden", b"wrong token: RUN_DIR/metrics.token has the run's\n"
        else:
            return app(environ, start_response)
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", "Bearer")]
        start_response(status, headers)
        return [body]

    return guarded


class MetricsEndpoint:
    """The endpoint, serving from the moment it is made until `close()`: a sink (call it with
    each event) whose figures a scrape of http://127.0.0.1:PORT/metrics reads. Its token is
    new for each session of the run, written to RUN_DIR/metrics.token (0600) once the port
    listens: a scraper that finds the token finds the endpoint answering."""

    def __init__(self, port: int, run_dir: Path, run: str, preset: str) -> None:
        check_prometheus_client()
        from prometheus_client import make_wsgi_app
        from prometheus_client.registry import CollectorRegistry

        self.port = port
        self.token = secrets.token_urlsafe(32)
        self.token_file = run_dir / TOKEN_NAME
        self.latest = LatestEvents()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RunCollector(self.latest, run, preset))  # type: ignore[arg-type]
        app = token_guard(make_wsgi_app(registry), self.token)
        try:
            self._server = make_server(
                HOST, port, app, server_class=_Server, handler_class=_QuietHandler
            )
        except OSError as e:
            raise ConfigError(port_refusal(port, e)) from None
        try:
            atomic_write_text(self.token_file, self.token + "\n", PRIVATE_MODE)
        except OSError:
            self._server.server_close()
            raise
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-endpoint", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/metrics"

    def __call__(self, event: Event) -> None:
        self.latest(event)

    def close(self) -> None:
        """Stop serving (Prometheus then sees the target down). Says nothing: nothing is lost."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
