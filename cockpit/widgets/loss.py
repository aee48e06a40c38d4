"""The Loss panel: raw train loss (faint), its debiased EMA, and val loss markers at each eval."""

from __future__ import annotations

import math
from typing import Any

from cockpit.axes import steady_limits
from cockpit.numbers import fmt_loss, fmt_tick
from cockpit.series import BoundedSeries, DebiasedEMA, downsample_minmax
from cockpit.widgets.plot import ThrottledPlot, palette

Y_AXIS_COLS = 9  # plotext's y labels and frame take about this many columns


class LossPanel(ThrottledPlot):
    """Loss vs steps (or tokens, `t`), linear or log y (`g`)."""

    BORDER_TITLE = "Loss"
    ALLOW_MAXIMIZE = True
    can_focus = True
    EMPTY_MESSAGE = "waiting for the first step..."

    def __init__(self, *, ema_beta: float = 0.9, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ema_beta = ema_beta
        self.x_tokens = False
        self.log_y = False
        self.reset()

    def reset(self) -> None:
        self.raw = BoundedSeries()
        self.raw_tok = BoundedSeries()
        self.smooth = BoundedSeries()
        self.smooth_tok = BoundedSeries()
        self.val = BoundedSeries(2_000)
        self.val_tok = BoundedSeries(2_000)
        self.ema = DebiasedEMA(self.ema_beta)
        self.nan_steps: list[tuple[float, float]] = []  # (step, tokens) where the loss was NaN
        self.last_loss: float | None = None
        self.last_val: float | None = None
        self.last_val_step: int | None = None
        self.best_val: float | None = None
        self.tokens_per_step = 0
        self.empty_message = self.EMPTY_MESSAGE
        self.touch()
        self.update_labels()

    # data ---------------------------------------------------------------------------------------
    def add_step(self, step: int, loss: float, tokens: int) -> None:
        self.last_loss = loss
        if not math.isfinite(loss):
            self.nan_steps = [*self.nan_steps[-4:], (step, tokens)]
        self.raw.append(step, loss)
        self.raw_tok.append(tokens, loss)
        smoothed = self.ema.update(loss)
        if smoothed is not None and math.isfinite(loss):
            self.smooth.append(step, smoothed)
            self.smooth_tok.append(tokens, smoothed)
        self.touch()

    def add_eval(self, step: int, val_loss: float, tokens: int | None = None) -> None:
        if tokens is None:
            tokens = step * self.tokens_per_step
        self.val.append(step, val_loss)
        self.val_tok.append(tokens, val_loss)
        self.last_val, self.last_val_step = val_loss, step
        if math.isfinite(val_loss) and (self.best_val is None or val_loss < self.best_val):
            self.best_val = val_loss
        self.touch()

    def toggle_x(self) -> bool:
        self.x_tokens = not self.x_tokens
        self.touch()
        self.update_labels()
        return self.x_tokens

    def toggle_log(self) -> bool:
        self.log_y = not self.log_y
        self.touch()
        self.update_labels()
        return self.log_y

    def has_data(self) -> bool:
        return bool(self.raw) or bool(self.val)

    # text ---------------------------------------------------------------------------------------
    def update_labels(self) -> None:
        mode = "tokens" if self.x_tokens else "steps"
        flags = f"[not bold $foreground-muted]x:{mode}{' · log y' if self.log_y else ''}[/]"
        parts = []
        if self.last_loss is not None:
            style = "$error" if not math.isfinite(self.last_loss) else "$foreground-muted"
            parts.append(f"[{style}]┄ train {fmt_loss(self.last_loss)}[/]")
        if self.ema.value is not None:
            parts.append(f"[$primary]━ ema {fmt_loss(self.ema.value)}[/]")
        if self.last_val is not None:
            parts.append(f"[$warning]● val {fmt_loss(self.last_val)}[/]")
        self.set_labels(f"Loss {flags}", " ".join(parts))

    # drawing ------------------------------------------------------------------------------------
    def draw(self, plt: Any, width: int, height: int) -> None:
        pal = palette(self)
        raw, smooth, val = (
            (self.raw_tok, self.smooth_tok, self.val_tok)
            if self.x_tokens
            else (self.raw, self.smooth, self.val)
        )
        cols = max(8, width - Y_AXIS_COLS)
        nan_xs = [tok if self.x_tokens else step for step, tok in self.nan_steps]
        ends = [float(s.xs[i]) for s in (raw, val) if s for i in (0, -1)] + nan_xs
        if not ends:
            plt.text(self.empty_message, 0, 0)
            return
        # x limits first, from the series' ends, moving in round steps (1/64 of the span);
        # the buckets of the downsampling share them, so a new step changes only the last
        # bucket: most rows of the drawing stay as they were and are not repainted.
        x0, x1 = min(ends), max(ends)
        if x1 <= x0:
            x1 = x0 + 1
        x0, x1 = steady_limits(x0, x1)
        rx, ry = downsample_minmax(raw.xs, raw.ys, cols, (x0, x1))
        sx, sy = downsample_minmax(smooth.xs, smooth.ys, cols, (x0, x1))
        vx, vy = downsample_minmax(val.xs, val.ys, max(4, cols // 2), (x0, x1))
        ys_all = ry + sy + vy
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
        for step, tokens in self.nan_steps:
            x = tokens if self.x_tokens else step
            if x0 <= x <= x1:
                self.vline(plt, x, pal["error"])
        self.set_x_ticks(plt, x0, x1, width - Y_AXIS_COLS, fmt_tick)
        if not self.log_y:
            self.set_y_ticks(plt, lo, hi, height, lambda v: f"{v:.3g}")
