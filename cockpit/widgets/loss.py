"""The Loss panel: raw train loss (faint), its debiased EMA, and val loss markers at each eval;
other runs' curves laid under them (overlays) with a legend of their values
at the current run's x and the differences."""

from __future__ import annotations

import math
from typing import Any

from textual.binding import Binding
from textual.reactive import var

from cockpit.figures.axes import nice_ticks, steady_limits
from cockpit.figures.durations import fmt_duration
from cockpit.figures.numbers import fmt_loss, fmt_tick
from cockpit.figures.overlay import (
    AXES,
    RGB,
    Y_UNITS,
    LegendEntry,
    Overlay,
    TokenUnit,
    legend,
    tokenizer_note,
)
from cockpit.figures.series import BoundedSeries, DebiasedEMA, downsample_minmax
from cockpit.figures.training_clock import TrainingClock
from cockpit.widgets.loss_overlays import LossOverlays
from cockpit.widgets.plot import ThrottledPlot, palette

Y_AXIS_COLS = 9  # plotext's y labels and frame take about this many columns
SMOOTHING = ((0.9, "light"), (0.99, "heavy"), (0.0, "off"))  # `m` cycles, light first
X_WINDOWS = (1_000, 10_000, 100_000)  # `x` cycles: the whole run, then the last N steps
WARMUP_SHARE = 0.05  # the y range leaves out the first 5% of the x span (the ln(vocab) start)
# an intervention's mark on the x axis: (glyph, palette colour, what the legend calls it)
MARK_LEGEND = {"lr": ("▲", "accent", "LR set"), "rollback": ("↺", "error", "rollback")}
MARKS = {kind: (glyph, colour) for kind, (glyph, colour, _) in MARK_LEGEND.items()}


class LossPanel(ThrottledPlot):
    """Loss vs steps, tokens or training time (`t` cycles), linear or log y (`g`); other runs'
    curves lie under its own. The time axis is anchored where the training time is known
    exactly (`set_time_anchor`) and follows each step's `step_time_s` from there."""

    BORDER_TITLE = "Loss"
    ALLOW_MAXIMIZE = True
    can_focus = True
    EMPTY_MESSAGE = "waiting for the first step..."
    # The panel's own keys (the key table gives them their help and palette lines; the app binds
    # them too, so they work whichever panel has the focus).
    BINDINGS = [
        Binding("t", "toggle_x", "x: steps/tokens/time", show=False),
        Binding("g", "toggle_log", "log y", show=False),
        Binding("m", "cycle_smoothing", "smoothing", show=False),
        Binding("x", "cycle_x_window", "x range", show=False),
        Binding("y", "toggle_y_all", "y range", show=False),
    ]

    # how the curves are drawn: each change redraws the labels and, at the next flush, the plot
    smoothing = var(0, init=False)  # index into SMOOTHING
    x_window: var[int | None] = var(None, init=False)  # None: the whole run; N: the last N steps
    y_all = var(False, init=False)  # True: the y range takes the first steps' losses too
    x_axis = var("steps", init=False)  # one of AXES
    y_unit = var("loss", init=False)  # one of Y_UNITS
    log_y = var(False, init=False)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # the run's tokenizer where the opener knows it (`cockpit compare`): a tokenizer other
        # than its overlays' makes their losses per token incomparable (once the run recorded
        # bits per byte, its measured tokens per byte say so instead)
        self.current_tokenizer: str | None = None
        self._overlays = LossOverlays()
        self.reset()

    @property
    def ema_beta(self) -> float:
        return SMOOTHING[self.smoothing][0]

    @property
    def ema(self) -> DebiasedEMA:
        """The EMA drawn now (every smoothing is kept as the run goes: switching is exact)."""
        return self.emas[self.smoothing % len(self.emas)] if self.ema_beta else self.emas[0]

    @property
    def smooth(self) -> BoundedSeries:
        return self._smooth[self.smoothing % len(self._smooth)][0]

    @property
    def smooth_tok(self) -> BoundedSeries:
        return self._smooth[self.smoothing % len(self._smooth)][1]

    @property
    def smooth_time(self) -> BoundedSeries:
        return self._smooth[self.smoothing % len(self._smooth)][2]

    def series(self, axis: str | None = None) -> tuple[BoundedSeries, BoundedSeries, BoundedSeries]:
        """(raw, smoothed, val) against `axis` (default: the one shown)."""
        at = AXES.index(axis or self.x_axis)
        raws = (self.raw, self.raw_tok, self.raw_time)
        vals = (self.val, self.val_tok, self.val_time)
        return raws[at], self._smooth[self.smoothing % len(self._smooth)][at], vals[at]

    def reset(self) -> None:
        self.raw = BoundedSeries()
        self.raw_tok = BoundedSeries()
        self.raw_time = BoundedSeries()
        betas = [beta for beta, _ in SMOOTHING if beta]
        self.emas = [DebiasedEMA(beta) for beta in betas]
        self._smooth = [(BoundedSeries(), BoundedSeries(), BoundedSeries()) for _ in betas]
        self.val = BoundedSeries(2_000)
        self.val_tok = BoundedSeries(2_000)
        self.val_time = BoundedSeries(2_000)
        self.clock = TrainingClock()
        self.nan_steps: list[tuple[float, float]] = []  # (step, tokens) where the loss was NaN
        # (step, tokens, kind) of interventions: "lr" (an LR change), "rollback"; the newest 50
        self.markers: list[tuple[float, float, str]] = []
        self.last_loss: float | None = None
        self.last_val: float | None = None
        self.last_val_step: int | None = None
        self.best_val: float | None = None
        # bits per byte per nat of loss on each split, from the evals (None: none recorded)
        self.train_bpb_per_loss: float | None = None
        self.val_bpb_per_loss: float | None = None
        self.tokens_per_step = 0
        self.empty_message = self.EMPTY_MESSAGE
        self.touch()
        self.update_labels()

    # data ---------------------------------------------------------------------------------------
    def add_step(
        self, step: int, loss: float, tokens: int, step_time_s: float | None = None
    ) -> None:
        """A step's loss; with its `step_time_s` (Step.step_time_s) it is on the time axis.
        A step at or before the newest one drawn is trained again (after a rollback): the
        branch it abandoned goes, as the metrics log's readers drop it."""
        if self.raw.last is not None and step <= self.raw.last[0]:
            self.drop_from(step)
        self.last_loss = loss
        if not math.isfinite(loss):
            self.nan_steps = [*self.nan_steps[-4:], (step, tokens)]
        train_s = self.clock.step(step, step_time_s)
        self.raw.append(step, loss)
        self.raw_tok.append(tokens, loss)
        if train_s is not None:
            self.raw_time.append(train_s, loss)
        for ema, (by_step, by_tokens, by_time) in zip(self.emas, self._smooth, strict=True):
            smoothed = ema.update(loss)
            if smoothed is not None and math.isfinite(loss):
                by_step.append(step, smoothed)
                by_tokens.append(tokens, smoothed)
                if train_s is not None:
                    by_time.append(train_s, smoothed)
        self.touch()

    def drop_from(self, step: int) -> None:
        """Forget every reading from `step` on: a branch the run abandoned (a rollback to an
        earlier checkpoint), so its losses neither stay on the curve nor set the y range."""
        time_cut = self.clock.time_at(step) if self.clock.step_times else None
        self.raw.drop_from(step)
        self.raw_tok.keep_first(len(self.raw))  # appended with raw, decimated alike
        self.val.drop_from(step)
        self.val_tok.keep_first(len(self.val))
        for ema, (by_step, by_tokens, by_time) in zip(self.emas, self._smooth, strict=True):
            by_step.drop_from(step)
            by_tokens.keep_first(len(by_step))
            if time_cut is not None:
                by_time.drop_from(time_cut)
            ema.restart_at(by_step.last[1] if by_step.last is not None else None)
        if time_cut is not None:
            self.raw_time.drop_from(time_cut)
            self.val_time.drop_from(time_cut)
        self.clock.drop_from(step)
        self.nan_steps = [n for n in self.nan_steps if n[0] < step]
        self.markers = [m for m in self.markers if m[0] < step]
        self.last_loss = float(self.raw.last[1]) if self.raw.last is not None else None
        vals = [v for v in self.val.ys.tolist() if math.isfinite(v)]
        self.last_val = float(self.val.ys[-1]) if len(self.val) else None
        self.last_val_step = int(self.val.xs[-1]) if len(self.val) else None
        self.best_val = min(vals) if vals else None
        self.touch()

    def set_time_anchor(self, step: int, train_time_s: float) -> None:
        """The training time at `step`, known exactly (RunStarted's start_step and
        train_time_s; an Eval's step and train_time_s): steps after it count from it."""
        self.clock.set_anchor(step, train_time_s)

    def time_at(self, step: float) -> float | None:
        """The training time at `step`, between the timed steps (None before any)."""
        return self.clock.time_at(step)

    def _tokens_at(self, step: int) -> float:
        """The tokens trained by `step`: the newest step's own count when it is that step (a
        batch-size schedule's steps are not all tokens_per_step), else tokens_per_step each."""
        if self.raw.last is not None and self.raw.last[0] == step and self.raw_tok.last is not None:
            return self.raw_tok.last[0]
        return step * self.tokens_per_step

    def add_marker(self, step: int, kind: str) -> None:
        """Mark an intervention on the curve (what was done, to see what followed)."""
        self.markers = [*self.markers[-49:], (step, self._tokens_at(step), kind)]
        self.touch()

    def add_eval(
        self,
        step: int,
        val_loss: float,
        tokens: int | None = None,
        train_time_s: float | None = None,
        train_loss: float | None = None,
        train_bpb: float | None = None,
        val_bpb: float | None = None,
    ) -> None:
        """An eval; its `train_time_s` (Eval.train_time_s) also anchors the training time; its
        bits per byte (Eval.train_bpb, val_bpb) let the panel draw in them."""
        self.train_bpb_per_loss = _per_loss(train_bpb, train_loss, self.train_bpb_per_loss)
        self.val_bpb_per_loss = _per_loss(val_bpb, val_loss, self.val_bpb_per_loss)
        if tokens is None:
            tokens = self._tokens_at(step)
        if train_time_s is not None and math.isfinite(train_time_s):
            self.set_time_anchor(step, train_time_s)
        else:
            train_time_s = self.time_at(step)
        self.val.append(step, val_loss)
        self.val_tok.append(tokens, val_loss)
        if train_time_s is not None:
            self.val_time.append(train_time_s, val_loss)
        self.last_val, self.last_val_step = val_loss, step
        if math.isfinite(val_loss) and (self.best_val is None or val_loss < self.best_val):
            self.best_val = val_loss
        self.touch()

    def _drawing_changed(self) -> None:
        self.touch()
        self.update_labels()

    watch_smoothing = watch_x_window = watch_y_all = _drawing_changed
    watch_x_axis = watch_y_unit = watch_log_y = _drawing_changed

    def cycle_x_axis(self) -> str:
        """steps -> tokens -> training time -> steps; returns the new axis' name."""
        self.x_axis = AXES[(AXES.index(self.x_axis) + 1) % len(AXES)]
        return self.x_axis

    def set_y_unit(self, unit: str) -> None:
        """Draw the losses (and the overlays, and the legend) in `unit`: one of Y_UNITS."""
        if unit not in Y_UNITS:
            raise ValueError(f"unknown y unit {unit!r}: one of {', '.join(Y_UNITS)}")
        self.y_unit = unit

    def scale(self, split: str) -> float | None:
        """What the `split` (train or val) losses are multiplied by in the unit shown; None in
        bits per byte before an eval recorded them (the run's own curves are then not drawn)."""
        if self.y_unit == "loss":
            return 1.0
        return self.train_bpb_per_loss if split == "train" else self.val_bpb_per_loss

    # overlays -----------------------------------------------------------------------------------
    @property
    def overlays(self) -> list[Overlay]:
        return self._overlays.runs

    @property
    def overlay_colours(self) -> list[RGB]:
        """The overlays' colours, parallel to them."""
        return self._overlays.colours

    def set_overlays(self, overlays: list[Overlay]) -> None:
        """Overlay these runs (replacing any before); a run keeps its colour while it stays."""
        self._overlays.set(overlays)
        self.touch()
        self.update_labels()

    def current_x(self) -> float | None:
        """The current run's newest step on the x axis shown (None before any)."""
        raw = self.series()[0]
        return None if raw.last is None else raw.last[0]

    def current_value(self) -> float | None:
        """The current run's loss at its newest step, as drawn: the EMA, or the raw loss (in the
        unit shown)."""
        value = self.ema.value if self.ema_beta else self.last_loss
        scale = self.scale("train")
        return None if value is None or scale is None else value * scale

    def legend_entries(self) -> list[LegendEntry]:
        """Each overlay's loss at the current run's x, smoothed as the panel smooths."""
        return self._overlays.entries(self.current_x(), self.x_axis, self.ema_beta, self.y_unit)

    def legend_width(self) -> int:
        """Columns the bottom border gives its label: Textual keeps a corner, a line and a
        space on each side (a longer label is cut with an ellipsis)."""
        width = self.outer_size.width or self.size.width
        return max(16, (width or 80) - 6)

    def cycle_smoothing(self) -> str:
        """light (0.9) -> heavy (0.99) -> off -> light; returns the new setting's name."""
        self.smoothing = (self.smoothing + 1) % len(SMOOTHING)
        return SMOOTHING[self.smoothing][1]

    def cycle_x_window(self) -> int | None:
        """The whole run -> the last 1k -> 10k -> 100k steps (those shorter than the run so
        far) -> the whole run; returns the window (None: the whole run)."""
        span = float(self.raw.xs[-1] - self.raw.xs[0]) if len(self.raw) > 1 else 0.0
        windows = [None, *(n for n in X_WINDOWS if n < span)]
        at = windows.index(self.x_window) if self.x_window in windows else 0
        self.x_window = windows[(at + 1) % len(windows)]
        return self.x_window

    def toggle_y_all(self) -> bool:
        self.y_all = not self.y_all
        return self.y_all

    def toggle_log(self) -> bool:
        self.log_y = not self.log_y
        return self.log_y

    # the panel's keys: drawn at once ---------------------------------------------------------
    def action_toggle_x(self) -> None:
        """`t`: the x axis cycles steps -> tokens -> training time."""
        self.cycle_x_axis()
        self.flush(force=True)

    def action_toggle_log(self) -> None:
        self.toggle_log()
        self.flush(force=True)

    def action_cycle_smoothing(self) -> None:
        self.cycle_smoothing()
        self.flush(force=True)

    def action_cycle_x_window(self) -> None:
        if self.cycle_x_window() is None and not self.x_window:
            self.notify("the whole run is shown", timeout=2)  # too short for a window yet
        self.flush(force=True)

    def action_toggle_y_all(self) -> None:
        self.toggle_y_all()
        self.flush(force=True)

    def has_data(self) -> bool:
        return bool(self.raw) or bool(self.val)

    # text ---------------------------------------------------------------------------------------
    def update_labels(self) -> None:
        mode = self.x_axis
        if self.x_window:
            mode += f" last {fmt_tick(self.x_window)}"
        # the defaults say nothing: only what was changed with a key
        extras = [
            "bits/byte" if self.y_unit == "bpb" else "",
            "log y" if self.log_y else "",
            "y:all" if self.y_all else "",
        ]
        if self.smoothing:
            extras.append(f"ema:{SMOOTHING[self.smoothing][1]}")
        shown = "".join(f" · {e}" for e in extras if e)
        flags = f"[not bold $foreground-muted]x:{mode}{shown}[/]{self._marks_legend()}"
        parts = []
        train_scale, val_scale = self.scale("train"), self.scale("val")
        if self.last_loss is not None:
            style = "$error" if not math.isfinite(self.last_loss) else "$foreground-muted"
            parts.append(f"[{style}]┄ train {_scaled(self.last_loss, train_scale)}[/]")
        if self.ema_beta and self.ema.value is not None:
            parts.append(f"[$primary]━ ema {_scaled(self.ema.value, train_scale)}[/]")
        if self.last_val is not None:
            parts.append(f"[$warning]● val {_scaled(self.last_val, val_scale)}[/]")
        note = None
        if self._overlays and self.y_unit == "loss":
            own = TokenUnit(self.current_tokenizer, self.val_bpb_per_loss)
            note = tokenizer_note([own, *self._overlays.units()], self.legend_width())
        if note is not None:  # the legend's differences would compare unlike units
            self.set_labels(f"Loss {flags}", f"[$warning]{note}[/]")
            return
        if self._overlays:  # the legend: the runs compared, at the current run's x
            subtitle = legend(self.current_value(), self.legend_entries(), self.legend_width())
            self.set_labels(f"Loss {flags}", subtitle)
            return
        self.set_labels(f"Loss {flags}", " ".join(parts))

    def _marks_legend(self) -> str:
        """What the marks on the x axis are, for the kinds the run has ('' for none)."""
        kinds = {kind for _, _, kind in self.markers}
        return "".join(
            f" [not bold ${colour}]{glyph} {name}[/]"
            for kind, (glyph, colour, name) in MARK_LEGEND.items()
            if kind in kinds
        )

    # drawing ------------------------------------------------------------------------------------
    def _y_range_points(
        self, xs: list[float], ys: list[float], x0: float, x1: float
    ) -> list[float]:
        """The losses the y range is taken from: all of them with `y_all`, else those past the
        first WARMUP_SHARE of the x span, so the first steps' ln(vocab) does not squash the rest
        (drawn above the top edge: plotext clips them)."""
        if self.y_all:
            return ys
        cut = x0 + WARMUP_SHARE * (x1 - x0)
        kept = [y for x, y in zip(xs, ys, strict=True) if x >= cut]
        return kept or ys

    def _x_of(self, step: float, tokens: float) -> float | None:
        """A step's x on the axis shown (a marker's, a NaN's)."""
        if self.x_axis == "tokens":
            return tokens
        if self.x_axis == "time":
            return self.time_at(step)
        return step

    def _window_per_step(self) -> float:
        """x per step on the axis shown: how wide the last-N-steps window is."""
        if self.x_axis == "tokens":
            return float(self.tokens_per_step or 1)
        if self.x_axis == "time":
            return self.clock.seconds_per_step() or 1.0
        return 1.0

    def _set_time_ticks(self, plt: Any, lo: float, hi: float, width: int) -> None:
        """Ticks at round durations (seconds, minutes or hours), written as clocks."""
        unit = 3600.0 if hi - lo >= 3 * 3600 else 60.0 if hi - lo >= 180 else 1.0
        n = max(2, min(6, width // 14))
        ticks = [t * unit for t in nice_ticks(lo / unit, hi / unit, n) if lo <= t * unit <= hi]
        if ticks:
            short = hi - lo < 10  # a run of seconds: its ticks fall between whole seconds
            plt.xticks(ticks, [f"{t:.3g}s" if short else fmt_duration(t) for t in ticks])

    def draw(self, plt: Any, width: int, height: int) -> None:
        pal = palette(self)
        raw, smooth, val = self.series()
        cols = max(8, width - Y_AXIS_COLS)
        nan_xs = [self._x_of(step, tok) for step, tok in self.nan_steps]
        nan_xs = [x for x in nan_xs if x is not None]
        ends = [float(s.xs[i]) for s in (raw, val) if s for i in (0, -1)] + nan_xs
        if not ends:
            untimed = self.x_axis == "time" and bool(self.raw)
            plt.text(
                "no training time for these steps yet" if untimed else self.empty_message, 0, 0
            )
            return
        # x limits first, from the series' ends, moving in round steps (1/64 of the span);
        # the buckets of the downsampling share them, so a new step changes only the last
        # bucket: most rows of the drawing stay as they were and are not repainted.
        x0, x1 = min(ends), max(ends)
        if self.x_window:  # the last N steps (in tokens or time: what N steps take)
            x0 = max(x0, x1 - self.x_window * self._window_per_step())
        if x1 <= x0:
            x1 = x0 + 1
        x0, x1 = steady_limits(x0, x1)
        rx, ry = downsample_minmax(raw.xs, raw.ys, cols, (x0, x1))
        sx, sy = (
            ([], [])
            if not self.ema_beta
            else downsample_minmax(smooth.xs, smooth.ys, cols, (x0, x1))
        )
        vx, vy = downsample_minmax(val.xs, val.ys, max(4, cols // 2), (x0, x1))
        if self.y_unit != "loss":  # in bits per byte: each split's losses times its factor
            train_scale, val_scale = self.scale("train"), self.scale("val")
            rx, ry = _times(rx, ry, train_scale)
            sx, sy = _times(sx, sy, train_scale)
            vx, vy = _times(vx, vy, val_scale)
        # first: under the current run's lines
        ox, oy = self._overlays.draw(
            self, plt, self.x_axis, self.ema_beta, x0, x1, cols, self.y_unit
        )
        ys_all = self._y_range_points(rx + sx + vx + ox, ry + sy + vy + oy, x0, x1)
        if self.log_y:
            ys_all = [y for y in ys_all if y > 0]
        if not ys_all:
            plt.text(self.empty_message, 0, 0)
            return
        lo, hi = min(ys_all), max(ys_all)
        if hi - lo <= 1e-6 * max(abs(hi), 1e-6):  # a flat line: give it some room
            mid = (lo + hi) / 2
            half = max(abs(mid) * 0.05, 1e-3)
            lo, hi = mid - half, mid + half
            if self.log_y and lo <= 0:
                lo = mid / 2
        if self.log_y:
            plt.yscale("log")
            lo, hi = lo / 1.05, hi * 1.05
        else:
            pad = (hi - lo) * 0.04
            lo, hi = lo - pad, hi + pad
        # Limits move in round steps: new data seldom changes the axes, and unchanged axes let
        # the plot reuse plotext's frame (see ThrottledPlot).
        plt.xlim(x0, x1)
        if self.log_y:
            log_lo, log_hi = steady_limits(math.log10(lo), math.log10(hi))
            lo, hi = 10**log_lo, 10**log_hi
            plt.ylim(log_lo, log_hi)  # plotext takes log-scale limits in log10
        else:
            lo, hi = steady_limits(lo, hi)
            plt.ylim(lo, hi)
        if rx:
            self.line(plt, rx, ry, pal["muted"])
        if sx:
            self.line(plt, sx, sy, pal["primary"])
        if vx:
            self.points(plt, vx, vy, "●", pal["warning"])
        for step, tokens, kind in self.markers:
            # on the x axis, not across the chart: six interventions striped it with lines
            x = self._x_of(step, tokens)
            if x is not None and x0 <= x <= x1:
                glyph, colour = MARKS[kind]
                self.axis_mark(plt, x, glyph, pal[colour])
        for step, tokens in self.nan_steps:
            x = self._x_of(step, tokens)
            if x is not None and x0 <= x <= x1:
                self.vline(plt, x, pal["error"])
        if self.x_axis == "time":
            self._set_time_ticks(plt, x0, x1, width - Y_AXIS_COLS)
        else:
            self.set_x_ticks(plt, x0, x1, width - Y_AXIS_COLS, fmt_tick)
        if not self.log_y:
            self.set_y_ticks(plt, lo, hi, height, lambda v: f"{v:.3g}")


def _per_loss(bpb: float | None, loss: float | None, known: float | None) -> float | None:
    """bpb / loss where both are finite and positive, else what was known before."""
    if bpb is None or loss is None or not (math.isfinite(bpb) and math.isfinite(loss)):
        return known
    return bpb / loss if bpb > 0 and loss > 0 else known


def _scaled(loss: float, scale: float | None) -> str:
    """A loss in the unit shown ('-' where that unit is not known yet)."""
    return fmt_loss(None if scale is None else loss * scale)


def _times(xs: Any, ys: Any, scale: float | None) -> tuple[list[float], list[float]]:
    """The points with each y times `scale`; none where the scale is not known."""
    if scale is None:
        return [], []
    return list(xs), [y * scale for y in ys]
