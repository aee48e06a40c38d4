"""The Prometheus endpoint (`--metrics-port`, `log.metrics_port`): a live tiny run scraped over
real HTTP on 127.0.0.1 and read with prometheus_client's own parser, its token, and the one-line
refusals of a taken port and a missing package."""

from __future__ import annotations

import errno
import os
import socket
import stat
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from command_here import cockpit_here
from tiny import set_args, tiny_overrides

from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.rundir.metrics_endpoint import (
    MISSING_PACKAGE,
    TOKEN_NAME,
    MetricsEndpoint,
    port_in_use,
    port_refusal,
)
from engine.train.trainer import Trainer

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(port: int, token: str) -> dict[str, list[Any]]:
    """Each family's samples, as Prometheus would read them: name -> [Sample, ...]."""
    status, text = get(f"http://127.0.0.1:{port}/metrics", token)
    assert status == 200, text
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    [found] = [s for s in samples[name] if labels.items() <= s.labels.items()]
    return found.value


def wait_for(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_live_run_is_scraped_with_its_token(tmp_path: Path) -> None:
    port = free_port()
    cfg = load_preset("tiny", tiny_overrides("train.max_steps=100000", f"log.metrics_port={port}"))
    run_dir = tmp_path / "run"
    trainer = Trainer(cfg, run_dir=run_dir, telemetry=False)
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    try:
        token_file = run_dir / TOKEN_NAME
        wait_for(lambda: token_file.exists() and token_file.read_text().strip())
        token = token_file.read_text().strip()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        url = f"http://127.0.0.1:{port}/metrics"

        first = wait_for(lambda: (s := scrape(port, token)).get("cockpit_step") and s)
        later = wait_for(
            lambda: (
                (s := scrape(port, token))["cockpit_step"][0].value > first["cockpit_step"][0].value
                and s
            )
        )
        labels = {"run": "run", "preset": "tiny"}
        assert later["cockpit_step"][0].labels == labels
        assert value(later, "cockpit_state", cockpit_state="running", **labels) == 1
        assert value(later, "cockpit_state", cockpit_state="paused", **labels) == 0
        for name in ("cockpit_train_loss", "cockpit_train_loss_ema", "cockpit_learning_rate"):
            assert 0 < value(later, name, **labels) < 100, name
        assert value(later, "cockpit_tokens_per_second", **labels) > 0
        assert value(later, "cockpit_memory_bytes", category="weights", **labels) > 0

        # without the token, or with another, nothing but a refusal
        assert get(url)[0] == 401
        assert get(url, "not-the-token")[0] == 403
        assert get(f"{url}?token={token}")[0] == 200
    finally:
        trainer.stop(checkpoint=False)
        thread.join(timeout=60)
    assert not thread.is_alive()
    with pytest.raises(OSError):  # the run ended: nothing listens any more
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_evaluations_and_the_run_state_are_served(tmp_path: Path) -> None:
    """The figures are made from the newest events, whichever thread sent them."""
    from engine.events import Eval, StateChanged, Step

    port = free_port()
    endpoint = MetricsEndpoint(port, tmp_path, "r1", "nanogpt-cpu")
    try:
        token = (tmp_path / TOKEN_NAME).read_text().strip()
        assert set(scrape(port, token)) == {"cockpit_state"}  # nothing reported yet: no zeros
        endpoint(StateChanged(state="paused", step=3))
        endpoint(
            Step(
                step=3,
                loss=2.0,
                lr=1e-3,
                grad_norm=0.5,
                tokens_per_s=100.0,
                step_time_s=0.1,
                tokens=96,
            )
        )
        endpoint(
            Step(
                step=4,
                loss=float("nan"),
                lr=1e-3,
                grad_norm=0.5,
                tokens_per_s=100.0,
                step_time_s=0.1,
                tokens=128,
            )
        )
        endpoint(Eval(step=4, train_loss=1.9, val_loss=2.1, train_time_s=1.0, val_bpb=3.0))
        got = scrape(port, token)
        labels = {"run": "r1", "preset": "nanogpt-cpu"}
        assert value(got, "cockpit_state", cockpit_state="paused", **labels) == 1
        assert value(got, "cockpit_step", **labels) == 4
        assert "cockpit_train_loss" not in got  # a NaN loss is left out, never served as a number
        assert value(got, "cockpit_train_loss_ema", **labels) == 2.0  # the NaN skipped
        assert value(got, "cockpit_val_loss", **labels) == 2.1
        assert value(got, "cockpit_val_bpb", **labels) == 3.0
    finally:
        endpoint.close()


def test_each_gpu_s_reading_is_served_the_run_s_own_share_included(tmp_path: Path) -> None:
    """A GPU's figures from the newest telemetry (as NVML gave them; this machine has none),
    labelled with its index; a figure the driver could not tell is left out."""
    from engine.events import DeviceReading, Telemetry

    port = free_port()
    endpoint = MetricsEndpoint(port, tmp_path, "r1", "gpt2-small")
    try:
        token = (tmp_path / TOKEN_NAME).read_text().strip()
        gpu = DeviceReading(
            index=0,
            name="NVIDIA GeForce RTX 4090",
            util_percent=97.0,
            mem_used=20 * 2**30,
            mem_total=24 * 2**30,
            process_mem=19 * 2**30,
            process_util_percent=91.5,
            power_w=402.0,
        )
        endpoint(Telemetry(source="nvml", gpus=(gpu,)))
        got = scrape(port, token)
        labels = {"run": "r1", "preset": "gpt2-small", "gpu": "0"}
        assert value(got, "cockpit_gpu_utilisation_percent", **labels) == 97.0
        assert value(got, "cockpit_gpu_process_utilisation_percent", **labels) == 91.5
        assert value(got, "cockpit_gpu_process_memory_bytes", **labels) == 19 * 2**30
        assert value(got, "cockpit_gpu_power_watts", **labels) == 402.0
        assert "cockpit_gpu_temperature_celsius" not in got  # unknown: left out, not 0
    finally:
        endpoint.close()


def test_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cockpit_here(
            "train", "--headless", "--preset", "tiny", "--metrics-port", str(port),
            "--run-dir", str(tmp_path / "run"), *set_args(tiny_overrides("train.max_steps=2")),
        )  # fmt: skip
        with pytest.raises(ConfigError) as refused:  # the engine's own check, if it got there
            MetricsEndpoint(port, tmp_path, "r", "tiny")
    assert done.returncode == 2
    assert done.stderr == f"cockpit: {port_in_use(port)}\n"
    assert (
        f"port {port} on 127.0.0.1 is in use" in done.stderr and "--metrics-port N" in done.stderr
    )
    assert str(refused.value) == port_in_use(port)
    assert not (tmp_path / "run").exists()


def test_without_prometheus_client_the_run_is_refused_in_one_line(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    done = cockpit_here(
        "train", "--headless", "--preset", "tiny", "--metrics-port", str(free_port()),
        "--run-dir", str(tmp_path / "run"), *set_args(tiny_overrides("train.max_steps=2")),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == f"cockpit: {MISSING_PACKAGE}\n"
    assert "pip install 'cockpit[metrics]'" in MISSING_PACKAGE
    assert not (tmp_path / "run").exists()


def test_a_headless_run_says_where_its_endpoint_is(tmp_path: Path) -> None:
    port = free_port()
    run_dir = tmp_path / "run"
    done = cockpit_here(
        "train", "--headless", "--preset", "tiny", "--metrics-port", str(port),
        "--run-dir", str(run_dir), *set_args(tiny_overrides("train.max_steps=2", quiet=True)),
        env={**os.environ, "TERM": "dumb"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = f"metrics: http://127.0.0.1:{port}/metrics for Prometheus, with the token in {run_dir}/metrics.token"
    assert line in done.stdout.splitlines()
    token = (run_dir / TOKEN_NAME).read_text().strip()
    assert len(token) >= 32 and token not in done.stdout  # the token stays in its file


def test_a_port_this_user_may_not_use_is_named_as_such() -> None:
    # as root (where this suite runs) no port is refused for privileges: the line for it alone
    refused = port_refusal(80, PermissionError(errno.EACCES, "Permission denied"))
    assert refused == (
        "log.metrics_port: port 80 needs privileges this user lacks (ports below 1024 do); "
        "choose a port from 1024 to 65535: --metrics-port N"
    )
    assert port_refusal(9100, OSError(errno.EADDRINUSE, "Address in use")) == port_in_use(9100)
