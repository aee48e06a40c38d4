"""The Learning-rate panel: the planned schedule, the LR applied so far, hand changes and now.

The planned curve is drawn once; only the "now" marker moves. A settings change's schedule can
be previewed ahead of the run (`set_preview`); a run whose tokens a step change draws them too,
as a staircase with its own scale on the right.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cockpit.figures.numbers import fmt_lr, fmt_lr_tick, fmt_tick
from cockpit.figures.series import BoundedSeries, downsample_minmax
from cockpit.widgets.plot import ThrottledPlot, palette

Y_AXIS_COLS = 10


class LrPanel(ThrottledPlot):
    BORDER_TITLE = "Learning rate"
    ALLOW_MAXIMIZE = True
    can_focus = True
    EMPTY_MESSAGE = "waiting for the schedule..."

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(min_interval=2.0, budget=0.005, **kwargs)
        self.reset()

    def reset(self) -> None:
        self.planned: list[tuple[int, float]] = []
        self._planned_xs = self._planned_ys = np.zeros(0)
        self.max_steps = 0
        self.start_step = 0
        self.applied = BoundedSeries(10_000)
        self.changes: list[tuple[int, float, float]] = []  # (step, old, new)
        self.scale = 1.0
        self.step = 0
        self.lr: float | None = None
        self.preview: tuple[tuple[int, float], ...] = ()  # the re-planned schedule, not applied
        self.preview_max_steps = 0
        self.tokens_schedule: tuple[tuple[int, int], ...] = ()  # (step, tokens a step from it)
        self._col = -1
        self.empty_message = self.EMPTY_MESSAGE  # a new run waits again (after "no run")
        self.touch()
        self.update_labels()

    # data ---------------------------------------------------------------------------------------
    def set_plan(self, planned: Any, max_steps: int, start_step: int = 0) -> None:
        self.planned = [(int(s), float(v)) for s, v in planned]
        # as arrays once, for drawing: the plan changes only when a change re-plans it
        self._planned_xs = np.array([p[0] for p in self.planned], dtype=np.float64)
        self._planned_ys = np.array([p[1] for p in self.planned], dtype=np.float64)
        self.max_steps = max(int(max_steps), 1)
        self.start_step = start_step
        self.step = start_step
        self.touch()
        self.update_labels()

    def set_tokens_schedule(self, schedule: Any) -> None:
        """(step, tokens a step from it on) pairs of a batch-size schedule or sequence-length
        warmup, drawn beside the LR; () draws none."""
        self.tokens_schedule = tuple((int(s), int(t)) for s, t in schedule or ())
        self.touch()
        self.update_labels()

    def tokens_curve(self, x_hi: float, top: float) -> tuple[list[float], list[float]]:
        """The tokens a step as a staircase to step `x_hi`, the largest step size at `top`."""
        schedule = self.tokens_schedule
        if not schedule:
            return [], []
        full = max(t for _, t in schedule) or 1
        xs: list[float] = []
        ys: list[float] = []
        for i, (step, tokens) in enumerate(schedule):
            until = schedule[i + 1][0] if i + 1 < len(schedule) else max(x_hi, step)
            xs += [float(step), float(until)]
            ys += [top * tokens / full] * 2
        return xs, ys

    def replan(self, planned: Any, max_steps: int, from_step: int) -> None:
        """A settings change re-planned the schedule from `from_step` on: the plan ahead is
        the new one, its past stays as it was planned (the applied LR draws what happened).
        A preview shown goes: what it previewed is the plan now."""
        ahead = [(int(s), float(v)) for s, v in planned if int(s) >= from_step]
        self.planned = [p for p in self.planned if p[0] < from_step] + ahead
        self._planned_xs = np.array([p[0] for p in self.planned], dtype=np.float64)
        self._planned_ys = np.array([p[1] for p in self.planned], dtype=np.float64)
        self.max_steps = max(int(max_steps), 1)
        self._col = -1  # the axis may have changed: the next step redraws
        self.preview, self.preview_max_steps = (), 0
        self.touch()
        self.update_labels()

    def _column(self, step: int) -> int:
        cols = max(8, self.size.width - Y_AXIS_COLS) * 2  # braille: two dots per column
        return int(step * cols / max(self.max_steps, 1))

    def add_step(self, step: int, lr: float) -> None:
        changed_lr = self.lr is None or abs(lr - self.lr) > 1e-3 * max(abs(self.lr), 1e-30)
        if self.applied.last is not None and step <= self.applied.last[0]:
            self.drop_from(step)  # trained again after a rollback
        self.step, self.lr = step, lr
        self.applied.append(step, lr)
        col = self._column(step)
        if col != self._col or (changed_lr and not self.applied_follows_plan(step, lr)):
            self._col = col
            self.touch()

    def drop_from(self, step: int) -> None:
        """Forget the LRs applied from `step` on: a branch the run abandoned (a rollback to an
        earlier checkpoint), as the loss panel forgets its losses."""
        if self.applied.last is None or step > self.applied.last[0]:
            return
        self.applied.drop_from(step)
        self.changes = [c for c in self.changes if c[0] < step]
        self.touch()

    def applied_follows_plan(self, step: int, lr: float) -> bool:
        """Whether lr is what the plan times the multiplier predicts (then no redraw needed)."""
        planned = self.planned_at(step)
        if planned is None:
            return False
        return abs(planned * self.scale - lr) <= 0.02 * max(abs(lr), 1e-30)

    def planned_at(self, step: int) -> float | None:
        """The planned LR at a step, interpolated linearly between the plan's points."""
        pts = self.planned
        if not pts:
            return None
        if step <= pts[0][0]:
            return pts[0][1]
        if step >= pts[-1][0]:
            return pts[-1][1]
        lo, hi = 0, len(pts) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pts[mid][0] <= step:
                lo = mid
            else:
                hi = mid
        (s0, v0), (s1, v1) = pts[lo], pts[hi]
        return v0 + (v1 - v0) * (step - s0) / max(s1 - s0, 1)

    def add_change(self, step: int, old_lr: float, new_lr: float, scale: float) -> None:
        self.changes = [*self.changes[-49:], (step, old_lr, new_lr)]
        self.scale = scale
        self.lr = new_lr
        self.touch()

    def set_preview(self, curve: Any, max_steps: int) -> bool:
        """Draw `curve` ((step, planned LR) pairs over a run of `max_steps`) as the schedule a
        change would give, beside the planned one; `clear_preview` takes it away. Returns
        whether it changed (the same preview again is no redraw)."""
        preview = tuple((int(s), float(v)) for s, v in curve)
        if preview == self.preview and int(max_steps) == self.preview_max_steps:
            return False
        self.preview, self.preview_max_steps = preview, int(max_steps)
        self.touch()
        self.update_labels()
        return True

    def clear_preview(self) -> bool:
        """Returns whether there was a preview to clear."""
        if not self.preview:
            return False
        self.preview, self.preview_max_steps = (), 0
        self.touch()
        self.update_labels()
        return True

    def on_resize(self) -> None:
        self.update_labels()

    def has_data(self) -> bool:
        return bool(self.planned) or bool(self.applied)

    def update_labels(self) -> None:
        legend = "[not bold $foreground-muted]planned[/] [not bold $primary]applied[/]"
        if abs(self.scale - 1.0) > 1e-9:
            legend += " [not bold $warning]ahead[/]"
        if self.preview:
            legend += " [bold $success]preview[/]"
        narrow = 0 < self.size.width < 56
        if self.tokens_schedule:  # cut short, "tokens/step" read "tokens/s…", a rate
            legend += f" [not bold $secondary]{'tok/step' if narrow else 'tokens/step'}[/]"
        name = "LR" if narrow else "Learning rate"
        title = f"{name} {legend}" if self.planned else name
        if self.lr is None:
            self.set_labels(title, "")
            return
        mult = f"×{self.scale:.3g}"
        mult_style = "$foreground-muted" if abs(self.scale - 1.0) < 1e-9 else "bold $warning"
        self.set_labels(title, f"now {fmt_lr(self.lr)} [{mult_style}]{mult}[/]")

    # drawing ------------------------------------------------------------------------------------
    def draw(self, plt: Any, width: int, height: int) -> None:
        pal = palette(self)
        cols = max(8, width - Y_AXIS_COLS)
        x_hi = max(self.max_steps, self.step, self.preview_max_steps, 1)
        ys_all: list[float] = []
        if self.tokens_schedule and self.planned:
            # under the LR curves: the step's size, its full size at the peak LR's height
            tx, ty = self.tokens_curve(x_hi, float(self._planned_ys.max()))
            self.line(plt, tx, ty, pal["secondary"])
        if self.planned:
            px, py = downsample_minmax(self._planned_xs, self._planned_ys, cols, (0, x_hi))
            self.line(plt, px, py, pal["muted"])
            ys_all += py
            if abs(self.scale - 1.0) > 1e-9:
                fx = [x for x in px if x >= self.step]
                fy = [y * self.scale for x, y in zip(px, py, strict=True) if x >= self.step]
                if fx:
                    self.line(plt, fx, fy, pal["warning"])
                    ys_all += fy
        if self.preview:
            # ahead of the run only (its past is trained), with the multiplier it goes on with
            ahead = [(x, y * self.scale) for x, y in self.preview if x >= self.step]
            if ahead:
                vx = np.array([p[0] for p in ahead], dtype=np.float64)
                vy = np.array([p[1] for p in ahead], dtype=np.float64)
                qx, qy = downsample_minmax(vx, vy, cols, (0, x_hi))
                self.line(plt, qx, qy, pal["success"])
                ys_all += qy
        if self.applied:
            # buckets on the fixed axis: a new step changes only the last one
            ax, ay = downsample_minmax(self.applied.xs, self.applied.ys, cols, (0, x_hi))
            self.line(plt, ax, ay, pal["primary"])
            ys_all += ay
        for step, old, new in self.changes:
            self.points(plt, [step], [new], "▲" if new >= old else "▼", pal["warning"])
            ys_all.append(new)
        if self.lr is not None:
            ys_all.append(self.lr)
        hi = max(ys_all) * 1.1 if ys_all else 1.0
        hi = hi if hi > 0 else 1.0
        plt.xlim(0, x_hi)
        plt.ylim(0, hi)
        if self.step > 0:
            self.vline(plt, self.step, pal["faint"])
        if self.lr is not None:
            self.points(plt, [self.step], [self.lr], "●", pal["primary"])
        self.set_x_ticks(plt, 0, x_hi, width - Y_AXIS_COLS, fmt_tick)
        self.set_y_ticks(plt, 0, hi, height, fmt_lr_tick)
        if self.tokens_schedule and self.planned:
            self._tokens_axis(plt, hi, float(self._planned_ys.max()))

    def _tokens_axis(self, plt: Any, hi: float, top: float) -> None:
        """The staircase's own scale, on the right: it is drawn with its full size at `top` (the
        peak LR) of an axis to `hi`, so the right axis runs to hi/top of the full size, and its
        ticks are the smallest and the largest step sizes (drawn on the LR's scale alone, the
        staircase had no figure anywhere)."""
        sizes = tokens_axis_ticks(self.tokens_schedule)
        if not sizes or top <= 0:
            return
        full = sizes[-1]
        plt.scatter([0.0], [0.0], marker=" ", yside="right")  # plotext draws a side it plots on
        plt.ylim(0, hi / top * full, yside="right")
        labels = [fmt_tokens(t) for t in sizes]
        if self.size.width >= 56:  # narrower, the columns are the plot's (the legend says it)
            labels[-1] += " tok"
        plt.yticks(sizes, labels, yside="right")


def tokens_axis_ticks(schedule: Any) -> list[int]:
    """The right axis' ticks for a tokens-a-step schedule: its smallest and largest step sizes
    (one tick when they are the same; none without a schedule)."""
    sizes = sorted({int(t) for _, t in schedule or () if int(t) > 0})
    return sorted({sizes[0], sizes[-1]}) if sizes else []


def fmt_tokens(tokens: int) -> str:
    """A step's tokens as a tick: exact below 10k (1,024 is not '1k'), compact above."""
    return f"{tokens:,}" if tokens < 10_000 else fmt_tick(tokens)
