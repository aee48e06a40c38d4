"""What the screen knows about the run on it, as one record, and the status line drawn from it.

A new run (a start, a preset switch) starts from a fresh `RunView`: replacing the record resets
everything at once, so no field can be forgotten in a reset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from textual.content import Content

from cockpit.figures.anomaly import Anomaly
from cockpit.figures.durations import fmt_duration
from cockpit.figures.numbers import fmt_int, fmt_loss, fmt_si
from cockpit.figures.progress import ProgressTracker
from cockpit.widgets.status import LIVE_STATES, Segment, progress_bar
from engine.events import RunStarted, RunState


@dataclass
class RunView:
    info: RunStarted | None = None  # the run's RunStarted event, once it came
    step: int = 0
    max_steps: int = 0
    tokens_per_s: float | None = None  # None until this session's first live step
    grad_norm: float | None = None
    mfu: float = 0.0
    data_share: float = 0.0  # of the step time, the part spent waiting for batches
    update_ratio: float | None = None
    lr: float | None = None
    scale: float = 1.0
    last_checkpoint: tuple[int, str, str] | None = None  # step, path, reason
    # the run's config (RunStarted's, with the changes since) when that checkpoint was saved
    checkpoint_config: Mapping[str, Any] | None = None
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    alert: tuple[str, str, int | None] | None = None  # level, message, expires at step
    anomaly: Anomaly | None = None  # a NaN or spike the run is stopped at, until resumed
    requested: str | None = None  # optimistic pause/resume until acknowledged
    checkpoint_pending: bool = False  # c was pressed and the engine has not answered yet
    checkpoint_nagged: bool = False  # "already saving" was said for the pending save
    checkpoint_said: bool = False  # the pending save's "saving..." toast was shown


def status_segments(
    view: RunView,
    preset: str,
    state: str,
    last_loss: float | None,
    dropped_events: int = 0,
    trained_s: float | None = None,
) -> list[Segment]:
    """The status line's text for the run on screen, most important segments first in priority
    (`fit_segments` drops the rest at narrow widths). Speed, ETA and MFU only while it trains."""
    segs: list[Segment] = []
    segs.append(Segment(Content.styled(preset, "bold"), 1))
    if view.max_steps:
        pct = 100.0 * view.step / view.max_steps if view.max_steps else 0.0
        segs.append(
            Segment(
                Content.assemble(
                    ("step ", "$foreground-muted"),
                    (f"{fmt_int(view.step)}", "bold"),
                    (f"/{fmt_int(view.max_steps)}", "$foreground-muted"),
                ),
                0,
            )
        )
        segs.append(Segment(progress_bar(view.step / view.max_steps, 16), 8))
        segs.append(Segment(Content.styled(f"{pct:.0f}%", "$foreground-muted"), 6))
    loss = last_loss
    if loss is not None:
        style = "bold" if math.isfinite(loss) else "bold $error"
        segs.append(
            Segment(
                Content.assemble(("loss ", "$foreground-muted"), (fmt_loss(loss), style)), 2
            )
        )
    if state in LIVE_STATES:
        # "–" until this session's first step: a resumed run's replayed speed is not live
        speed = "–" if view.tokens_per_s is None else fmt_si(view.tokens_per_s)
        segs.append(
            Segment(
                Content.assemble((speed, "bold"), (" tok/s", "$foreground-muted")),
                2,
            )
        )
    if trained_s is not None:  # the training time (TrainingClock.trained_s), named as it is
        segs.append(
            Segment(
                Content.assemble(("trained ", "$foreground-muted"), fmt_duration(trained_s)), 4
            )
        )
    if state == RunState.RUNNING and view.max_steps and view.step >= view.max_steps:
        # every step trained: the engine evaluates, samples and saves before it says finished
        # (tens of seconds on a big eval), and 'ETA 0s' all that while read as a hang
        segs.append(Segment(Content.styled("final evaluation…", "bold $accent"), 0))
    elif state in LIVE_STATES:
        eta = view.tracker.eta(view.step, view.max_steps) if view.max_steps else None
        if eta is not None:
            segs.append(
                Segment(
                    Content.assemble(
                        ("ETA ", "$foreground-muted"), (fmt_duration(eta), "bold")
                    ),
                    3,
                )
            )
    if view.grad_norm is not None:
        g = view.grad_norm
        style = "$error" if not math.isfinite(g) else ""
        segs.append(
            Segment(
                Content.assemble(
                    ("‖g‖ ", "$foreground-muted"),
                    (fmt_loss(g) if not math.isfinite(g) else f"{g:.3g}", style),
                ),
                5,
            )
        )
    if view.mfu > 0 and state in LIVE_STATES:
        peak = view.info.peak_source if view.info is not None else ""
        label = "MFU~" if peak.startswith("measured") else "MFU "
        # the engine corrects its peak so this cannot exceed 1; an old or foreign event might
        shown = f"{100 * min(view.mfu, 1.0):.1f}%"
        segs.append(Segment(Content.assemble((label, "$foreground-muted"), shown), 6))
    if view.data_share >= 0.05 and state in LIVE_STATES:
        # only worth a place when the loader is a real part of the step
        segs.append(Segment(Content.assemble(("data ", "$warning"), f"{100 * view.data_share:.0f}%"), 6))
    if view.update_ratio is not None:
        r = view.update_ratio
        style = "$warning" if r > 1e-2 else ""
        segs.append(Segment(Content.assemble(("Δw/w ", "$foreground-muted"), (f"{r:.1e}", style)), 7))
    if view.last_checkpoint is not None:
        step, _path, _reason = view.last_checkpoint
        segs.append(
            Segment(Content.assemble(("ckpt ", "$foreground-muted"), f"@{fmt_int(step)}"), 7)
        )
    if dropped_events:
        segs.append(
            Segment(Content.styled(f"⚠ {fmt_int(dropped_events)} events dropped", "$warning"), 1)
        )
    info = view.info
    if info is not None:
        segs.append(
            Segment(
                Content.styled(
                    f"{info.device} {info.dtype} · {fmt_si(info.n_params)} params",
                    "$foreground-muted",
                ),
                9,
            )
        )
    return segs
