"""Events the engine emits: typed, immutable, timestamped, and cheap to create.

The engine pushes them to a bounded `EventQueue` that any thread may drain (the cockpit does, as
they arrive) and hands each one to its sinks (the metrics file, the headless progress printer) on
the training thread. Every event turns into one JSON line of `metrics.jsonl` via `to_record`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import threading
import time
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


class RunState:
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    SAVING = "saving"
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"
    ENDED = (STOPPED, FINISHED, FAILED)


def _now() -> float:
    return time.time()


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"
    time: float = field(default_factory=_now, kw_only=True)

    def to_record(self) -> dict[str, Any]:
        """The event as strict JSON data: a non-finite float (NaN, inf) becomes None (null)."""
        return _strict_json({"kind": self.kind, **dataclasses.asdict(self)})

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Event:
        """The event that `to_record` made `record` from, once it went through JSON and back.

        Exact for every type in EVENT_TYPES (a null `float` is NaN again; a missing field takes its
        default). ValueError for a record that is not one of these events or not of `cls`'s kind."""
        kind = record.get("kind")
        event_type = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
        if event_type is None or not issubclass(event_type, cls):
            raise ValueError(f"not a record of {cls.__name__}: kind {kind!r}")
        fields = {name: value for name, value in record.items() if name != "kind"}
        try:
            return _from_json_fields(event_type, fields)
        except (TypeError, ValueError, OverflowError) as e:  # Overflow: an int beyond any float
            raise ValueError(f"malformed {kind!r} record: {e}") from None


def _strict_json(value: Any) -> Any:
    # JSON has no NaN or Infinity; Python writes them bare, and strict parsers (JavaScript's
    # JSON.parse, jq, Go) reject the whole line.
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(v) for v in value]
    return value


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """A dataclass's fields and their declared types (the annotations here are strings)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _from_json_fields(cls: type, fields: Mapping[str, Any]) -> Any:
    types_by_name = _field_types(cls)
    unknown = sorted(set(fields) - set(types_by_name))
    if unknown:
        raise TypeError(f"unknown fields {unknown}")
    return cls(**{name: _from_json(value, types_by_name[name]) for name, value in fields.items()})


def _from_json(value: Any, declared: Any) -> Any:
    """`value` as parsed from JSON, turned back into the `declared` type (undoes _strict_json)."""
    if value is None:
        return math.nan if declared is float else None
    origin = typing.get_origin(declared)
    if origin in (typing.Union, types.UnionType):
        arms = [arm for arm in typing.get_args(declared) if arm is not type(None)]
        return _from_json(value, arms[0]) if len(arms) == 1 else value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list, got {value!r}")
        args = typing.get_args(declared)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json(item, args[0]) for item in value)
        if len(args) != len(value):
            raise TypeError(f"expected {len(args)} items, got {value!r}")
        return tuple(_from_json(item, arg) for item, arg in zip(value, args, strict=True))
    if dataclasses.is_dataclass(declared):
        if not isinstance(value, Mapping):
            raise TypeError(f"expected an object, got {value!r}")
        return _from_json_fields(declared, value)
    if declared is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # JSON writes 2.0 as 2.0, but a writer may say 2
    return value


@dataclass(frozen=True)
class RunStarted(Event):
    """The resolved run: everything the cockpit needs to lay out its panels."""

    kind: ClassVar[str] = "run_started"
    run_dir: str
    preset: str
    description: str
    config: dict[str, Any]
    device: str
    dtype: str
    n_params: int
    n_params_non_embedding: int
    vocab_size: int
    tokenizer: str
    train_tokens: int
    val_tokens: int
    start_step: int
    max_steps: int
    tokens_per_step: int
    planned_lr: tuple[tuple[int, float], ...]  # (step, lr) downsampled over the whole run
    resumed_from: str | None = None
    memory_plan: dict[str, int] | None = None  # pre-flight estimate: bytes by category + capacity
    flops_per_token: float = 0.0
    peak_flops: float = 0.0  # FLOP/s the MFU is measured against
    peak_source: str = ""  # "table: H100 bf16" or "measured: ..."
    notes: tuple[str, ...] = ()  # a resume: what it changed or kept, one line each
    data_source: dict[str, Any] | None = None  # the corpus, as source_record() records it
    train_time_s: float = 0.0  # training time already done before this session (a resume)
    # a batch-size schedule or sequence-length warmup: (step, tokens a step from it on) at step
    # 0 and at each change of shape; () = tokens_per_step at every step
    tokens_schedule: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Step(Event):
    kind: ClassVar[str] = "step"
    step: int  # optimizer steps completed
    loss: float
    lr: float
    grad_norm: float
    tokens_per_s: float
    step_time_s: float
    tokens: int  # tokens trained on so far
    mfu: float = 0.0  # model FLOPs utilisation, 0..1
    data_time_s: float = 0.0  # of step_time_s, the time spent waiting for batches
    update_ratio: float = float("nan")  # ||lr * update|| / ||weights||, sampled (nan when not)


@dataclass(frozen=True)
class Eval(Event):
    kind: ClassVar[str] = "eval"
    step: int
    train_loss: float
    val_loss: float
    train_time_s: float  # training wall time so far, evaluation excluded
    full_split: bool = False
    # the losses in bits per byte of text: loss / ln 2 * the split's tokens / its UTF-8 bytes,
    # comparable across tokenizers (None: not known, as in records written before them)
    train_bpb: float | None = None
    val_bpb: float | None = None


@dataclass(frozen=True)
class Sample(Event):
    kind: ClassVar[str] = "sample"
    step: int
    prompt: str
    text: str


@dataclass(frozen=True)
class CheckpointSaved(Event):
    kind: ClassVar[str] = "checkpoint"
    step: int
    path: str
    reason: str  # interval, manual, final, stop, best


@dataclass(frozen=True)
class StateChanged(Event):
    kind: ClassVar[str] = "state"
    state: str
    step: int
    reason: str = ""
    # the run's training time at this state (Trainer.train_time_s): exact where a run pauses,
    # saves or ends, so no view has to estimate it from step times (None: not known)
    train_time_s: float | None = None


@dataclass(frozen=True)
class LrChanged(Event):
    """Acknowledges set_lr/scale_lr: the LR the optimizer applies from the next step."""

    kind: ClassVar[str] = "lr_changed"
    step: int
    old_lr: float
    new_lr: float
    scale: float  # multiplier now applied on top of the planned schedule
    # a change made during warmup: the LR its ramp reaches at `warmup_ends` (the LR typed), on
    # from there; None after warmup, where new_lr is already that LR
    after_warmup_lr: float | None = None
    warmup_ends: int | None = None


@dataclass(frozen=True)
class SettingsChanged(Event):
    """Acknowledges a `set` (or a change replayed from a config.toml's timeline): the settings in
    force from the next step on."""

    kind: ClassVar[str] = "settings_changed"
    step: int
    changes: dict[str, list[Any]]  # key -> [old, new] (JSON keeps a pair as a list)
    by: str = "app"
    replayed: bool = False  # made at its step by a replayed config.toml, not asked now
    max_steps: int = 0  # the run's length from now on
    tokens_per_step: int = 0
    planned_lr: tuple[tuple[int, float], ...] = ()  # the re-planned schedule; () = unchanged


@dataclass(frozen=True)
class ThreadsChosen(Event):
    """On CPU with `train.threads = 0`: the thread count a measurement kept, and each measured
    count's median step time (engine/train/thread_tuner.py): at the first steps, then whenever
    the step time drifts and every few minutes."""

    kind: ClassVar[str] = "threads"
    step: int
    threads: int
    previous: int  # the count in use before the measurement
    step_times_s: dict[str, float]  # thread count (a JSON key) -> median step time measured at it
    reason: str  # why it measured: the first steps, a drift of the step time, the interval

    @property
    def summary(self) -> str:
        """`threads 2 (measured: 1→410 ms, 2→240 ms)`."""
        times = sorted(self.step_times_s.items(), key=lambda item: int(item[0]))
        measured = ", ".join(f"{n}→{t * 1e3:.0f} ms" for n, t in times)
        return f"threads {self.threads} (measured: {measured})"


@dataclass(frozen=True)
class Alert(Event):
    kind: ClassVar[str] = "alert"
    level: str  # info, warning, error
    message: str
    step: int = 0
    code: str = ""  # machine-readable: nan, spike, oom, disk, data, config, ...


@dataclass(frozen=True)
class ViewerChanged(Event):
    """A viewer attached to (after its client hello) or detached from the control socket."""

    kind: ClassVar[str] = "viewer"
    viewer: int  # the server's number for the connection: 1, 2, ...
    who: str  # what the viewer said it is: "alice@gpu1 (pts/3)", "" when it did not say
    read_only: bool
    attached: bool  # False: it detached
    step: int = 0  # the run's newest step at the time


@dataclass(frozen=True)
class CommandReceived(Event):
    """A viewer's command, queued for the run: who gave it (its acknowledgement follows)."""

    kind: ClassVar[str] = "command"
    name: str  # the wire command: pause, scale_lr, ...
    args: dict[str, Any]
    viewer: int
    who: str
    step: int = 0  # the run's newest step at the time


@dataclass(frozen=True)
class DeviceReading:
    index: int
    name: str
    util_percent: float | None = None
    mem_util_percent: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    process_mem: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle: tuple[str, ...] = ()
    process_util_percent: float | None = None  # the run's own SM use since the last reading


@dataclass(frozen=True)
class Telemetry(Event):
    """One poll of the machine. source is 'nvml', 'psutil' or 'unavailable' (with reason)."""

    kind: ClassVar[str] = "telemetry"
    source: str
    gpus: tuple[DeviceReading, ...] = ()
    cpu_percent: float | None = None
    cpu_per_core: tuple[float, ...] = ()
    ram_used: int | None = None
    ram_total: int | None = None
    process_rss: int | None = None
    reason: str = ""
    process_cpu_percent: float | None = None  # the run's own process (100 = one core)


@dataclass(frozen=True)
class RankReading:
    """One rank of a torchrun world over the last report interval."""

    rank: int
    host: str
    local_rank: int
    steps: int  # steps this rank trained in the interval (0 while paused)
    step_time_s: float  # its own mean wall time per step in the interval (nan without steps)
    data_time_s: float  # of step_time_s, the time spent waiting for batches
    gpus: tuple[DeviceReading, ...] = ()  # its own GPU's newest reading (empty on CPU)
    cpu_percent: float | None = None  # this rank's process, over the interval (100 = one core)
    process_rss: int | None = None
    memory_peak: int | None = None  # bytes: its memory breakdown's total, or its peak


@dataclass(frozen=True)
class RankReport(Event):
    """Every rank of a torchrun world, gathered by rank 0 every few seconds (never emitted by
    a single process)."""

    kind: ClassVar[str] = "ranks"
    step: int
    ranks: tuple[RankReading, ...]

    @property
    def timed(self) -> list[RankReading]:
        """The ranks that trained steps in the interval."""
        return [r for r in self.ranks if r.steps > 0 and math.isfinite(r.step_time_s)]

    @property
    def mean_step_time_s(self) -> float:
        timed = self.timed
        return sum(r.step_time_s for r in timed) / len(timed) if timed else math.nan

    @property
    def slowest(self) -> RankReading | None:
        return max(self.timed, key=lambda r: r.step_time_s, default=None)

    @property
    def memory_max(self) -> RankReading | None:
        """The rank using the most memory (None when no rank could tell)."""
        known = [r for r in self.ranks if r.memory_peak is not None]
        return max(known, key=lambda r: r.memory_peak or 0, default=None)


@dataclass(frozen=True)
class MemoryBreakdown(Event):
    """Bytes by category on the training device; activations are measured or estimated."""

    kind: ClassVar[str] = "memory"
    step: int
    device: str
    capacity: int  # bytes of the device (RAM on CPU)
    weights: int
    gradients: int
    optimizer: int
    activations: int
    activations_measured: bool
    cache: int  # allocator reserved but unused
    other: int  # CUDA context and non-torch memory (RSS minus tensors on CPU)


@dataclass(frozen=True)
class DataProgress(Event):
    """The corpus being prepared (read, tokenized, written), before the first step: at most a
    few a second, and one with `done` true at the end (also when it was reused, not rebuilt)."""

    kind: ClassVar[str] = "data_progress"
    source: str  # the corpus, as the user would name it
    tokenizer: str
    bytes_read: int
    bytes_total: int  # 0 when unknown (a built-in text: its size is bytes_read at the end)
    documents: int  # documents (files, JSON lines, Parquet rows) read so far
    skipped: int  # documents left out (empty, no text field), counted, never silent
    tokens: int  # tokens written so far
    elapsed_s: float
    done: bool = False
    reused: bool = False  # prepared earlier: nothing was read but the metadata
    note: str = ""  # what happened to an earlier, interrupted preparation, if any

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.bytes_read / self.bytes_total) if self.bytes_total else None

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None until there is a rate and a total."""
        if self.done:
            return 0.0
        if not self.bytes_total or self.bytes_read <= 0 or self.elapsed_s <= 0:
            return None
        return (self.bytes_total - self.bytes_read) * self.elapsed_s / self.bytes_read


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStarted,
        Step,
        Eval,
        Sample,
        CheckpointSaved,
        StateChanged,
        LrChanged,
        SettingsChanged,
        Alert,
        ThreadsChosen,
        Telemetry,
        MemoryBreakdown,
        DataProgress,
        RankReport,
        ViewerChanged,
        CommandReceived,
    )
}


class EventQueue:
    """A bounded, thread-safe FIFO. When full, the oldest events are dropped and counted.

    Nothing is lost for good when that happens: every event also goes to the metrics file.
    """

    def __init__(self, capacity: int = 20_000) -> None:
        self._items: collections.deque[Event] = collections.deque(maxlen=capacity)
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, event: Event) -> None:
        with self._lock:
            if len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(event)

    def drain(self, limit: int | None = None) -> list[Event]:
        """Remove and return the queued events, oldest first (at most `limit`)."""
        with self._lock:
            if limit is None or limit >= len(self._items):
                out = list(self._items)
                self._items.clear()
            else:
                out = [self._items.popleft() for _ in range(limit)]
        return out

    def __len__(self) -> int:
        return len(self._items)
