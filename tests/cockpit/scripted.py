"""A stand-in for `engine.train.trainer.Trainer` that plays a fixed script of events.

It satisfies `engine.contract.EngineHandle` as the real trainer does (`state`, `drain_events`,
`dropped_events`, `run(should_stop)` and the thread-safe commands; tests/cockpit/test_contract.py
checks it), plus `events`, `step` and `cfg`, but no torch and nothing random or clocked: every
event has a fixed timestamp, so what the cockpit draws is the same on every run. Commands are
recorded in `calls` and acknowledged at once with the events the real engine would send.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from typing import Any

from engine.config.live import live_change
from engine.config.loading import config_from_dict
from engine.config.run_config import ConfigError, RunConfig
from engine.events import (
    Alert,
    CheckpointSaved,
    DeviceReading,
    Eval,
    Event,
    EventQueue,
    LrChanged,
    MemoryBreakdown,
    RunStarted,
    RunState,
    Sample,
    SettingsChanged,
    StateChanged,
    Step,
    Telemetry,
)
from engine.optim.schedule import planned_curve

T0 = 1_700_000_000.0  # the fixed clock every scripted event is stamped from
STEP_S = 0.2
TOKENS_PER_STEP = 12 * 64
GiB = 2**30
MiB = 2**20

SAMPLE_TEXTS = {
    "def ": "__init__(self, name, value=None):\n    self.name = name\n    return self._cache.get(key)",
    "The ": "module provides functions for working with the\nfile system; see also the os.path",
}


def planned_lr(
    step: int, max_steps: int, peak: float = 1e-3, warmup: int = 100, floor: float = 1e-4
) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def loss_at(step: int, rng: random.Random) -> float:
    return 1.45 + 2.75 * math.exp(-step / 55) + 0.25 * math.exp(-step / 400) + rng.gauss(0, 0.06)


def telemetry_event(kind: str, t: float, k: int) -> Telemetry:
    if kind == "nvml":
        gpus = (
            DeviceReading(
                index=0,
                name="NVIDIA H100 80GB HBM3",
                util_percent=94 + (k * 7) % 6,
                mem_util_percent=61,
                mem_used=int(61.3 * GiB),
                mem_total=80 * GiB,
                process_mem=int(60.1 * GiB),
                temperature_c=63,
                power_w=512 + (k * 13) % 40,
                power_limit_w=700,
                sm_clock_mhz=1980,
                throttle=(),
            ),
            DeviceReading(
                index=1,
                name="NVIDIA H100 80GB HBM3",
                util_percent=88 + (k * 5) % 9,
                mem_util_percent=59,
                mem_used=int(60.2 * GiB),
                mem_total=80 * GiB,
                process_mem=int(59.0 * GiB),
                temperature_c=78,
                power_w=690,
                power_limit_w=700,
                sm_clock_mhz=1755,
                throttle=("power",),
            ),
        )
        return Telemetry(source="nvml", gpus=gpus, cpu_percent=12.0, time=t)
    if kind == "unavailable":
        return Telemetry(source="unavailable", reason="psutil is not installed", time=t)
    cores = tuple(float(60 + (i * 17 + k * 11) % 40) for i in range(8))
    return Telemetry(
        source="psutil",
        cpu_percent=sum(cores) / len(cores),
        cpu_per_core=cores,
        ram_used=int((5.1 + 0.01 * (k % 5)) * GiB),
        ram_total=int(15.6 * GiB),
        process_rss=int(1.23 * GiB),
        process_cpu_percent=float(150 + (k * 23) % 60),
        time=t,
    )


def memory_event(kind: str, step: int, t: float) -> MemoryBreakdown:
    if kind == "nvml":
        return MemoryBreakdown(
            step=step,
            device="cuda:0",
            capacity=80 * GiB,
            weights=int(1.6 * GiB),
            gradients=int(1.6 * GiB),
            optimizer=int(3.2 * GiB),
            activations=int(41.5 * GiB),
            activations_measured=True,
            cache=int(6.3 * GiB),
            other=int(0.9 * GiB),
            time=t,
        )
    return MemoryBreakdown(
        step=step,
        device="cpu",
        capacity=int(15.6 * GiB),
        weights=int(3.2 * MiB),
        gradients=int(3.2 * MiB),
        optimizer=int(6.4 * MiB),
        activations=int(180 * MiB),
        activations_measured=False,
        cache=0,
        other=int(1.02 * GiB),
        time=t,
    )


def step_event(step: int, loss: float, lr: float, grad_norm: float, t: float) -> Step:
    return Step(
        step=step,
        loss=loss,
        lr=lr,
        grad_norm=grad_norm,
        tokens_per_s=TOKENS_PER_STEP / STEP_S * (0.97 + 0.03 * math.sin(step)),
        step_time_s=STEP_S,
        tokens=step * TOKENS_PER_STEP,
        time=t,
    )


ENGINE_HINT = "roll back to the last checkpoint with half the LR, or lower the LR"  # in words


def anomaly_events(
    anomaly: str, on_anomaly: str, step: int, t: float, preset: str, max_steps: int, scale: float
) -> list[Any]:
    """What the engine emits after a NaN, a non-finite gradient or a spike at `step`, in its
    words (the trainer's step and read-back, the fault handler's anomaly and rollback)."""
    if anomaly == "gradient":
        fault, code, at = (
            f"non-finite gradient at step {step} (loss 906); the update was not applied",
            "nan",
            step - 1,
        )
    elif anomaly == "spike":
        fault, code, at = (
            f"loss spike at step {step}: 9.1000 against a moving average of 1.6000",
            "spike",
            step,
        )
    else:
        fault, code, at = f"loss is not finite at step {step}", "nan", step
    if on_anomaly == "pause":
        return [
            Alert(
                level="error",
                code=code,
                step=at,
                message=f"{fault}: paused; {ENGINE_HINT}",
                time=t + 0.01,
            ),
            StateChanged(state="paused", step=at, reason=code, time=t + 0.02),
        ]
    ckpt = f"ckpt-{250:06d}.pt"
    old = planned_lr(250, max_steps) * scale
    events: list[Any] = [
        Alert(
            level="warning",
            code=code,
            step=at,
            message=f"{fault}; rolling back to {ckpt} with the LR halved",
            time=t + 0.01,
        ),
        LrChanged(step=250, old_lr=old, new_lr=old * 0.5, scale=scale * 0.5, time=t + 0.02),
        Alert(
            level="info",
            code="rollback",
            step=250,
            message=f"rolled back to step 250 ({ckpt}), LR x0.5",
            time=t + 0.03,
        ),
        StateChanged(state="running", step=250, reason="rolled back", time=t + 0.04),
    ]
    rng = random.Random(99)
    for i in range(1, 11):
        s = 250 + i
        lr = planned_lr(s, max_steps) * scale * 0.5
        events.append(step_event(s, loss_at(s, rng), lr, 0.5, t + 0.1 + i * STEP_S))
    return events


def build_script(
    preset: str = "default",
    *,
    steps: int = 300,
    max_steps: int = 2000,
    telemetry: str = "psutil",
    nan_at: int | None = None,
    anomaly: str = "loss",
    on_anomaly: str = "pause",
    fail_at: int | None = None,
    lr_change_at: int | None = 220,
    eval_every: int = 100,
    sample_every: int = 100,
    finish: bool = False,
    config: dict[str, Any] | None = None,
) -> list[Any]:
    """The events of a run that got to `steps` (and possibly hit NaN or failed there).

    At `nan_at` the run meets an `anomaly`: "loss" (a NaN loss), "gradient" (a non-finite
    gradient with loss 906: the update refused, no Step) or "spike"; then, as the engine does,
    it pauses (`on_anomaly="pause"`, a person is watching) or rolls back to the checkpoint of
    step 250 with half the LR and trains 10 more steps (`on_anomaly="rollback"`).
    `config` is the RunStarted's config (by default only the preset's name: every setting
    its default); `max_steps` is put in it.
    """
    rng = random.Random(1234)
    device = "cuda:0" if telemetry == "nvml" else "cpu"
    plan = tuple((s, planned_lr(s, max_steps)) for s in range(0, max_steps + 1, 10))
    ev: list[Any] = [
        RunStarted(
            run_dir=f"runs/{preset}-scripted",
            preset=preset,
            description="scripted run for the cockpit tests",
            config={"name": preset} if config is None else {
                **config, "train": {**config.get("train", {}), "max_steps": max_steps}
            },
            device=device,
            dtype="bfloat16" if device != "cpu" else "float32",
            n_params=810_000,
            n_params_non_embedding=800_000,
            vocab_size=96,
            tokenizer="char",
            train_tokens=2_000_000,
            val_tokens=220_000,
            start_step=0,
            max_steps=max_steps,
            tokens_per_step=TOKENS_PER_STEP,
            planned_lr=plan,
            time=T0,
        ),
        StateChanged(state="running", step=0, time=T0 + 1.5),
        telemetry_event(telemetry, T0 + 1.0, 0),
    ]
    scale = 1.0
    t = T0 + 2.0
    k = 1
    for step in range(1, steps + 1):
        t = T0 + 2.0 + step * STEP_S
        if lr_change_at is not None and step == lr_change_at:
            old = planned_lr(step, max_steps) * scale
            scale = 1.25
            ev.append(LrChanged(step=step, old_lr=old, new_lr=old * 1.25, scale=scale, time=t))
        loss = loss_at(step, rng)
        gnorm = 0.4 + 1.6 * math.exp(-step / 80) + abs(rng.gauss(0, 0.05))
        if nan_at is not None and step == nan_at:
            if anomaly == "spike":
                loss = 9.1
            else:
                loss, gnorm = float("nan"), float("nan")
        refused = nan_at is not None and step == nan_at and anomaly == "gradient"
        if not refused:  # a non-finite gradient is never applied: no Step for it
            ev.append(step_event(step, loss, planned_lr(step, max_steps) * scale, gnorm, t))
        if step % 5 == 0:
            ev.append(telemetry_event(telemetry, t + 0.01, k))
            k += 1
        if step in (50, 250):
            ev.append(memory_event(telemetry, step, t + 0.02))
        if eval_every and step % eval_every == 0:
            val = loss_at(step, rng) + 0.08
            ev.append(
                Eval(
                    step=step,
                    train_loss=loss_at(step, rng),
                    val_loss=val,
                    train_time_s=step * STEP_S,
                    time=t + 0.5,
                )
            )
        if sample_every and step % sample_every == 0:
            for prompt in ("def ", "The "):
                ev.append(
                    Sample(
                        step=step, prompt=prompt, text=prompt + SAMPLE_TEXTS[prompt], time=t + 0.6
                    )
                )
        if step == 250:
            ev.append(
                CheckpointSaved(
                    step=step,
                    path=f"runs/{preset}-scripted/ckpt-000250.pt",
                    reason="interval",
                    time=t + 0.7,
                )
            )
        if nan_at is not None and step == nan_at:
            ev += anomaly_events(anomaly, on_anomaly, step, t, preset, max_steps, scale)
            break
        if fail_at is not None and step == fail_at:
            ev.append(
                Alert(
                    level="error",
                    code="oom",
                    step=step,
                    message="CUDA out of memory: tried to allocate 2.00 GiB "
                    "(GPU 0 has 80 GiB, 1.2 GiB free)",
                    time=t + 0.01,
                )
            )
            ev.append(
                StateChanged(state="failed", step=step, reason="out of memory", time=t + 0.02)
            )
            break
    else:
        if finish:
            ev.append(
                CheckpointSaved(
                    step=steps,
                    reason="final",
                    time=t + 1.0,
                    path=f"runs/{preset}-scripted/ckpt-{steps:06d}.pt",
                )
            )
            ev.append(StateChanged(state="finished", step=steps, time=t + 1.1))
    return ev


class ScriptedTrainer:
    """Plays `script` into `events` when run() starts, then idles until stopped."""

    outlives_viewer = False
    read_only = False
    replayed_until = 0.0  # as the in-process engine: a resume's history predates RunStarted
    recorded = False
    run_dir = None  # a scripted run writes nothing: its RunStarted names a directory
    telemetry_enabled = True

    def __init__(
        self,
        preset: str = "default",
        script: list[Any] | None = None,
        resume_from: str | None = None,
        **script_options: Any,
    ) -> None:
        self.preset = preset
        self.resume_from = resume_from  # as the real Trainer: what --resume named
        self.script = script if script is not None else build_script(preset, **script_options)
        self.events = EventQueue()
        self.cfg = None
        self.state = "starting"
        self.step = 0
        self.calls: list[tuple[Any, ...]] = []
        self.loaded = threading.Event()
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._queued = threading.Condition()  # notified at each event: wait_for_events wakes
        self._t = T0
        self._lr = 0.0
        self._scale = 1.0
        self._max_steps = 1
        self._config: RunConfig = config_from_dict({}, "the scripted run's config")

    # the run ---------------------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        for ev in self.script:
            self._emit(ev)
        self.loaded.set()
        if self.state in ("finished", "failed"):  # like the engine: run() returns at the end
            self.finished.set()
            return self.state
        try:
            while not self._stop.is_set():
                if should_stop is not None and should_stop():
                    with self._lock:
                        if self.state not in RunState.ENDED:
                            self.state = "stopped"
                    break
                self._stop.wait(0.01)
        finally:
            self.finished.set()
        return self.state

    def drain_events(self) -> list[Event]:
        return self.events.drain()

    def wait_for_events(self, timeout: float) -> bool:
        with self._queued:
            return self._queued.wait_for(lambda: len(self.events) > 0, timeout)

    def close(self) -> None:
        pass  # holds nothing to let go

    @property
    def dropped_events(self) -> int:
        return self.events.dropped

    def _emit(self, ev: Any) -> None:
        with self._lock:
            self._t = max(self._t, ev.time)
            kind = ev.kind
            if kind == "step":
                self.step, self._lr = ev.step, ev.lr
            elif kind == "state":
                self.state = ev.state
            elif kind == "run_started":
                self._max_steps = ev.max_steps
                self._config = config_from_dict(dict(ev.config), "the scripted run's config")
            elif kind == "lr_changed":
                self._lr, self._scale = ev.new_lr, ev.scale
            elif kind == "settings_changed":
                self._max_steps = ev.max_steps
        self.events.put(ev)
        with self._queued:
            self._queued.notify_all()

    def _next_time(self) -> float:
        with self._lock:
            self._t += 0.1
            return self._t

    def _ack_state(self, state: str, reason: str = "") -> None:
        self._emit(StateChanged(state=state, step=self.step, reason=reason, time=self._next_time()))

    # commands (any thread) ----------------------------------------------------------------------------
    def pause(self) -> None:
        self.calls.append(("pause",))
        self._ack_state("paused", "user")

    def resume(self) -> None:
        self.calls.append(("resume",))
        self._ack_state("running", "user")

    def checkpoint(self) -> None:
        self.calls.append(("checkpoint",))
        previous = self.state
        self._ack_state("saving")
        self._emit(
            CheckpointSaved(
                step=self.step,
                reason="manual",
                time=self._next_time(),
                path=f"runs/{self.preset}-scripted/ckpt-{self.step:06d}.pt",
            )
        )
        self._ack_state(previous if previous in ("running", "paused") else "running")

    def set_lr(self, lr: float) -> None:
        self.calls.append(("set_lr", lr))
        planned = planned_lr(self.step, self._max_steps)
        old = self._lr
        self._emit(
            LrChanged(
                step=self.step, old_lr=old, new_lr=lr, scale=lr / planned, time=self._next_time()
            )
        )

    def scale_lr(self, factor: float) -> None:
        self.calls.append(("scale_lr", factor))
        old = self._lr
        self._emit(
            LrChanged(
                step=self.step,
                old_lr=old,
                new_lr=old * factor,
                scale=self._scale * factor,
                time=self._next_time(),
            )
        )

    def rollback(self, lr_factor: float = 0.5, checkpoint: str | None = None) -> None:
        self.calls.append(("rollback", lr_factor) if checkpoint is None else ("rollback", lr_factor, checkpoint))
        saved = [e for e in self.script if e.kind == "checkpoint"]
        if not saved:
            self._emit(
                Alert(
                    level="warning",
                    code="rollback",
                    step=self.step,
                    message="no checkpoint to roll back to yet: lower the LR and resume",
                    time=self._next_time(),
                )
            )
            return
        ckpt = saved[-1]
        old = self._lr
        self.step = ckpt.step
        self._emit(
            LrChanged(
                step=ckpt.step,
                old_lr=old,
                new_lr=old * lr_factor,
                scale=self._scale * lr_factor,
                time=self._next_time(),
            )
        )
        name = ckpt.path.rsplit("/", 1)[-1]
        self._emit(
            Alert(
                level="info",
                code="rollback",
                step=ckpt.step,
                message=f"rolled back to step {ckpt.step} ({name}), LR x{lr_factor:g}",
                time=self._next_time(),
            )
        )
        self._ack_state("running", "rolled back")

    def set_settings(self, settings: dict[str, Any], by: str = "app") -> None:
        """Decided as the engine decides it (live_change on the run's config at its step): the
        SettingsChanged with each key's old and new value, and the re-planned schedule when it
        changed; a refusal is an Alert with code "set" that says why (nothing changes)."""
        self.calls.append(("set_settings", dict(settings), by))
        with self._lock:
            cfg, step = self._config, self.step
        answer = live_change(cfg, settings, step)
        if isinstance(answer, str):
            self._emit(
                Alert(level="warning", code="set", step=step, message=answer, time=self._next_time())
            )
            return
        new = answer.config
        with self._lock:
            self._config = new
        plan = planned_curve(new)
        self._emit(
            SettingsChanged(
                step=step,
                changes={key: [old, value] for key, (old, value) in answer.changes.items()},
                by=by,
                max_steps=new.train.max_steps,
                tokens_per_step=TOKENS_PER_STEP * new.train.grad_accum,
                planned_lr=plan if plan != planned_curve(cfg) else (),
                time=self._next_time(),
            )
        )

    def sample(self) -> None:
        self.calls.append(("sample",))
        self._emit(
            Sample(
                step=self.step, prompt="def ", text="def main():\n    pass", time=self._next_time()
            )
        )

    def evaluate(self) -> None:
        self.calls.append(("evaluate",))
        self._emit(
            Eval(
                step=self.step,
                train_loss=1.6,
                val_loss=1.7,
                train_time_s=self.step * STEP_S,
                time=self._next_time(),
            )
        )

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        self.calls.append(("stop", checkpoint))
        if self.state in RunState.ENDED:
            self._stop.set()
            return
        if checkpoint:
            self._emit(
                CheckpointSaved(
                    step=self.step,
                    reason="stop",
                    time=self._next_time(),
                    path=f"runs/{self.preset}-scripted/ckpt-{self.step:06d}.pt",
                )
            )
        self._ack_state("stopped", reason)
        self._stop.set()


class ScriptedFactory:
    """`trainer_factory` for the app: records the names asked for; can raise for some names."""

    def __init__(self, fail: dict[str, Exception] | None = None, **script_options: Any) -> None:
        self.fail = fail or {}
        self.script_options = script_options
        self.names: list[str] = []
        self.trainers: list[ScriptedTrainer] = []

    def __call__(self, name: str) -> ScriptedTrainer:
        self.names.append(name)
        if name in self.fail:
            raise self.fail[name]
        trainer = ScriptedTrainer(name, **self.script_options)
        self.trainers.append(trainer)
        return trainer

    @property
    def trainer(self) -> ScriptedTrainer:
        return self.trainers[-1]


def config_error(name: str) -> ConfigError:
    return ConfigError(f"presets/{name}.toml: optim.lr: expected a number > 0, got -0.001")
