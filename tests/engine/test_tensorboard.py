"""TensorBoard: the live sink (`--tensorboard`) and `cockpit export --format tensorboard`.

Real headless runs write the event files; tensorboard's own EventAccumulator reads them back,
as TensorBoard would show them.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from command_here import cockpit_here

from engine.config.run_config import ConfigError, RunConfig
from engine.events import Alert, Eval, Sample, Step
from engine.export import ExportError
from engine.export import tensorboard_events as tb_export
from engine.rundir.metrics_log import MetricsWriter, read_history
from engine.rundir.sinks import MISSING_TENSORBOARD, TensorBoardSink, log_sinks, open_event_file

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.plugin_event_accumulator import (  # noqa: E402
    EventAccumulator,
)
from tensorboard.util.tensor_util import make_ndarray  # noqa: E402

RUN = ["--preset", "tiny", "--set", "eval.interval=10", "--set", "checkpoint.interval=10"]


def cockpit(*args: str) -> subprocess.CompletedProcess:
    return cockpit_here(*args, env={**os.environ, "TERM": "dumb"})


def read_tensorboard(log_dir: Path) -> tuple[dict[str, list], dict[str, list]]:
    """Every scalar and text TensorBoard shows: tag -> [(step, value, wall time)].

    Read as TensorBoard's web UI reads (plugin_event_accumulator: every summary a tensor);
    the older event_accumulator does not apply a restart's purge to texts.
    """
    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    acc.Reload()
    scalars: dict[str, list] = {}
    texts: dict[str, list] = {}
    for tag in acc.Tags()["tensors"]:
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        values = [(e.step, make_ndarray(e.tensor_proto), e.wall_time) for e in acc.Tensors(tag)]
        if plugin == "scalars":
            scalars[tag] = [(step, float(v), w) for step, v, w in values]
        elif plugin == "text":
            texts[tag] = [(step, v.item().decode(), w) for step, v, w in values]
    return scalars, texts


def as_float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def history(run_dir: Path, kind: str) -> list:
    """The run's records of `kind` on the branch it ended on (read_history's rule)."""
    return [e for e in read_history(run_dir / "metrics.jsonl", 10**9) if e.kind == kind]


@pytest.fixture(scope="module")
def run20(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    """`cockpit train --headless --tensorboard` to step 20, run in this process (the command
    line's code, without a second interpreter importing torch)."""
    from cockpit.cli import main

    run_dir = tmp_path_factory.mktemp("tb") / "run"
    with pytest.MonkeyPatch.context() as patch:
        for name, value in isolated_env.items():
            patch.setenv(name, value)
        code = main(["train", "--headless", *RUN, "--tensorboard", "--run-dir", str(run_dir),
                     "--set", "train.max_steps=20"])  # fmt: skip
    assert code == 0
    return run_dir


def test_live_scalars_are_the_metrics_files(run20):
    scalars, texts = read_tensorboard(run20 / "tensorboard")
    steps = history(run20, "step")
    assert [s.step for s in steps] == list(range(1, 21))
    loss = scalars["train/loss"]
    assert [(step, value) for step, value, _ in loss] == [
        (s.step, as_float32(s.loss)) for s in steps
    ]
    assert [w for _, _, w in loss] == [s.time for s in steps]  # the record's own time
    assert [(st, v) for st, v, _ in scalars["train/lr"]] == [
        (s.step, as_float32(s.lr)) for s in steps
    ]
    for tag in ("train/grad_norm", "perf/tokens_per_s", "perf/step_time_s", "perf/mfu"):
        assert [st for st, _, _ in scalars[tag]] == list(range(1, 21)), tag
    evals = history(run20, "eval")
    assert [(st, v) for st, v, _ in scalars["eval/val_loss"]] == [
        (e.step, as_float32(e.val_loss)) for e in evals
    ]
    assert [st for st, _, _ in scalars["eval/train_loss"]] == [10, 20]
    assert [(st, v) for st, v, _ in scalars["eval/val_bpb"]] == [
        (e.step, as_float32(e.val_bpb)) for e in evals if e.val_bpb is not None
    ]
    assert [st for st, _, _ in scalars["eval/train_bpb"]] == [10, 20]  # bits per byte, each eval
    sample = history(run20, "sample")[-1]
    # shown as a Markdown code block: every line of the sample indented by four spaces
    block = "\n".join("    " + line for line in (sample.prompt + sample.text).split("\n"))
    assert block in texts["samples/text_summary"][-1][1]


def test_export_writes_what_the_sink_wrote(run20, tmp_path):
    done = cockpit("export", str(run20), "--format", "tensorboard", "--out", str(tmp_path / "tb"))
    assert done.returncode == 0, done.stderr
    assert f"tensorboard --logdir {tmp_path / 'tb'}" in done.stdout
    assert read_tensorboard(tmp_path / "tb") == read_tensorboard(run20 / "tensorboard")
    # again, from a checkpoint of the run, into the same folder: replaced, not doubled
    tb_export.export(run20 / "ckpt-00000020.pt", tmp_path / "tb")
    assert len(list((tmp_path / "tb").iterdir())) == 1
    assert read_tensorboard(tmp_path / "tb") == read_tensorboard(run20 / "tensorboard")


def test_resume_from_an_older_checkpoint_hides_the_abandoned_branch(run20, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(run20, run_dir)
    old = {s.step: s.time for s in history(run_dir, "step")}
    done = cockpit(
        "train", "--headless", "--resume", str(run_dir / "ckpt-00000010.pt"),
        "--set", "train.max_steps=30",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    scalars, _ = read_tensorboard(run_dir / "tensorboard")
    steps = history(run_dir, "step")
    loss = [(step, value) for step, value, _ in scalars["train/loss"]]
    assert [step for step, _ in loss] == list(range(1, 31))  # no step twice
    assert loss == [(s.step, as_float32(s.loss)) for s in steps]
    # steps 11..20 as the resumed session wrote them (resume is exact: the same losses)
    assert [w for _, _, w in scalars["train/loss"]] == [s.time for s in steps]
    assert all(s.time > old[20] for s in steps[10:])
    assert [st for st, _, _ in scalars["eval/val_loss"]] == [10, 20, 30]
    # the export follows the same branch
    tb_export.export(run_dir, tmp_path / "tb")
    assert read_tensorboard(tmp_path / "tb") == read_tensorboard(run_dir / "tensorboard")


def _step(step: int, loss: float) -> Step:
    return Step(
        step=step, loss=loss, lr=1e-3, grad_norm=1.0, tokens_per_s=100.0, step_time_s=0.1,
        tokens=step * 64, time=1000.0 + step,
    )  # fmt: skip


def test_a_rollback_inside_a_session_is_hidden_live_and_in_the_export(tmp_path):
    """Steps 1..5, an anomaly, a rollback to step 2, steps 3..6: TensorBoard shows 1..6 once,
    3..6 from the second branch, in the live log and in the export of its metrics file."""
    events = [_step(s, 5.0 - s / 10) for s in range(1, 6)]
    events += [Eval(step=4, train_loss=9.0, val_loss=9.5, train_time_s=1.0, time=1004.5)]
    events += [Alert(level="info", message="rolled back to step 2", step=2, code="rollback")]
    events += [_step(s, 4.0 - s / 10) for s in range(3, 7)]
    events += [Eval(step=6, train_loss=3.0, val_loss=3.5, train_time_s=2.0, time=1006.5)]
    events += [Sample(step=6, prompt="O ", text="Romeo *and*\n# Juliet", time=1006.6)]
    (tmp_path / "run").mkdir()
    metrics = MetricsWriter(tmp_path / "run" / "metrics.jsonl")
    sink = TensorBoardSink(open_event_file(tmp_path / "live"))
    for event in events:
        metrics(event)
        sink(event)
    metrics.close()
    sink.close()
    live_scalars, live_texts = read_tensorboard(tmp_path / "live")
    loss = [(step, value) for step, value, _ in live_scalars["train/loss"]]
    assert loss == [(1, as_float32(4.9)), (2, as_float32(4.8))] + [
        (s, as_float32(4.0 - s / 10)) for s in range(3, 7)
    ]
    assert [st for st, _, _ in live_scalars["eval/val_loss"]] == [6]  # step 4's was abandoned
    assert live_texts["samples/text_summary"][0][1] == "    O Romeo *and*\n    # Juliet"
    assert "rolled back to step 2" in live_texts["alerts/text_summary"][0][1]
    result = tb_export.export(tmp_path / "run", tmp_path / "exported")
    assert read_tensorboard(tmp_path / "exported") == (live_scalars, live_texts)
    assert any("abandoned" in note for note in result.notes)


class StuckWriter:
    """A SummaryWriter whose disk hangs: every write waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def add_scalar(self, *args, **kwargs) -> None:
        self.calls += 1
        self.release.wait()

    def add_text(self, *args, **kwargs) -> None:
        self.release.wait()

    def flush(self) -> None: ...

    def close(self) -> None: ...


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_the_sink_never_blocks_training():
    writer = StuckWriter()
    sink = TensorBoardSink(writer, capacity=8, purge=None)
    started = time.perf_counter()
    for step in range(1, 1001):
        sink(_step(step, 1.0))
    assert time.perf_counter() - started < 0.5  # 1000 calls, the writer stuck on the first
    assert 1000 - 9 <= sink.dropped <= 1000 - 8  # 8 queued, maybe one taken by the writer
    started = time.perf_counter()
    problem = sink.close(wait_s=0.3)
    assert time.perf_counter() - started < 1.5  # a bounded wait, not a hang
    assert "did not finish" in problem and f"{sink.dropped} events dropped" in problem
    assert "--format tensorboard" in problem  # and how to get the whole log back
    writer.release.set()


def test_the_sink_writes_everything_it_queued_before_close(tmp_path):
    sink = TensorBoardSink(open_event_file(tmp_path / "tb"))
    for step in range(1, 501):
        sink(_step(step, 1.0 / step))
    sink.close()
    assert sink.dropped == 0
    scalars, _ = read_tensorboard(tmp_path / "tb")
    assert [st for st, _, _ in scalars["train/loss"]] == list(range(1, 501))


def test_missing_tensorboard_is_one_config_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    cfg = RunConfig()
    cfg.log.tensorboard = True
    with pytest.raises(ConfigError) as e:
        log_sinks(cfg, tmp_path)
    assert str(e.value) == MISSING_TENSORBOARD
    assert MISSING_TENSORBOARD == (
        "log.tensorboard: the tensorboard package is not installed; "
        "pip install 'cockpit[tensorboard]' or turn it off"
    )
    cfg.log.tensorboard = False
    assert log_sinks(cfg, tmp_path) == []
    (tmp_path / "metrics.jsonl").write_text('{"kind":"step","step":1,"loss":1.0}\n')
    with pytest.raises(ExportError, match="pip install 'cockpit\\[tensorboard\\]'"):
        tb_export.export(tmp_path, tmp_path / "tb")


def test_a_run_without_tensorboard_fails_in_one_line(tmp_path):
    fake = tmp_path / "site" / "tensorboard"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('tensorboard is not here')\n")
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "train", "--headless", "--preset", "tiny",
         "--tensorboard", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TERM": "dumb", "PYTHONPATH": str(tmp_path / "site")},
    )  # fmt: skip
    # refused before anything starts: exit 2, one line, no run directory left behind
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"cockpit: {MISSING_TENSORBOARD}\n"
    assert not (tmp_path / "run").exists()


def test_export_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(ExportError, match="no such run directory"):
        tb_export.export(tmp_path / "nope", tmp_path / "out")
    with pytest.raises(ExportError, match="metrics.jsonl does not exist"):
        tb_export.export(tmp_path, tmp_path / "out")
    (tmp_path / "metrics.jsonl").write_text('{"kind":"step","step":1,"loss":1.0}\n')
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    with pytest.raises(ExportError, match="holds other files"):
        tb_export.export(tmp_path, tmp_path / "notes")
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"


def test_an_engine_run_without_tensorboard_fails_before_its_directory(monkeypatch, tmp_path):
    """A preset picked in the app (no CLI check) is refused by the engine before anything is on
    disk: the run fails with the one line, and no directory is left behind."""
    from engine.config.presets import load_preset
    from engine.train.trainer import Trainer

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    cfg = load_preset("tiny", ["log.tensorboard=true"])
    trainer = Trainer(cfg, run_dir=tmp_path / "run", telemetry=False, interactive=False)
    assert trainer.run() == "failed"
    alerts = [e for e in trainer.drain_events() if e.kind == "alert"]
    assert [a.message for a in alerts] == [MISSING_TENSORBOARD]
    assert not (tmp_path / "run").exists()


def test_a_sink_closing_with_a_problem_is_an_alert_in_the_metrics_file(tmp_path):
    """What a sink reports on closing (a TensorBoard log left incomplete) reaches the run's
    record as a warning, written before the metrics file itself closes."""
    from engine.config.presets import load_preset
    from engine.train.trainer import Trainer

    class Incomplete:
        def __call__(self, event) -> None: ...

        def close(self) -> str:
            return "TensorBoard log incomplete: 3 events dropped"

    cfg = load_preset("tiny", ["train.max_steps=2", "sample.interval=0"])
    trainer = Trainer(
        cfg, run_dir=tmp_path / "run", sinks=[Incomplete()], telemetry=False, interactive=False
    )
    assert trainer.run() == "finished"
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    alerts = [r for r in map(json.loads, lines) if r["kind"] == "alert"]
    assert [(a["level"], a["code"], a["message"]) for a in alerts] == [
        ("warning", "log", "TensorBoard log incomplete: 3 events dropped")
    ]
