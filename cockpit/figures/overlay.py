"""Other runs' loss curves laid over the current run's: pure, no Textual.

An `Overlay`, made once from a `RunCurves`, computes its EMAs over every step at once (numpy)
and caches the downsampling the loss panel draws per axes and width, so a redraw costs a lookup.
`ColourBook` keeps each overlaid run's colour; `legend` writes the panel's legend to a width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cockpit.figures.numbers import fmt_loss, fmt_tick
from cockpit.figures.series import downsample_minmax
from engine.rundir import RunCurves

RGB = tuple[int, int, int]
AXES = ("steps", "tokens", "time")  # what the loss panel's x axis can be
# what its y axis can be: the loss (nats per token), or bits per byte of text, which compares
# runs of different tokenizers (a char-level run's tokens are not a BPE run's)
Y_UNITS = ("loss", "bpb")
SMOOTHINGS = (0.9, 0.99, 0.0)  # the loss panel's EMA betas; 0.0 is the raw loss

# Told apart from each other and from the current run's own lines (the theme's primary blue
# EMA, warning orange val points, error red NaN lines, grey raw loss) on dark and light themes.
OVERLAY_COLOURS: tuple[RGB, ...] = (
    (0, 215, 140),  # sea green
    (170, 120, 255),  # violet
    (240, 240, 100),  # yellow
    (240, 90, 220),  # magenta
    (110, 200, 255),  # sky
    (160, 230, 60),  # lime
)
CACHE_SIZE = 16  # downsamplings kept per overlay (one per axes the panel has shown lately)


def debiased_ema(values: np.ndarray, beta: float) -> np.ndarray:
    """`DebiasedEMA(beta)` applied to `values` in turn, every output at once (no NaN inside:
    the caller drops non-finite losses, as the live EMA skips them).

    m_t = beta m_(t-1) + (1 - beta) y_t is a scan; within a block of L values it is
    (1 - beta) beta^j cumsum(y_i beta^-i), exact as long as beta^-L stays far inside float64,
    and each block starts from the one before's last m (a loop over blocks, not values)."""
    y = np.asarray(values, dtype=np.float64)
    n = len(y)
    if n == 0 or beta == 0.0:
        return y.copy()
    block = max(1, min(n, int(-200 * math.log(10) / math.log(beta))))  # beta^-block <= 1e200
    blocks = -(-n // block)
    padded = np.zeros(blocks * block)
    padded[:n] = y
    grid = padded.reshape(blocks, block)
    j = np.arange(block)
    grow, decay = beta ** -j.astype(np.float64), beta ** j.astype(np.float64)
    within = (1.0 - beta) * np.cumsum(grid * grow, axis=1) * decay  # each block from m = 0
    carry_in = np.zeros(blocks)  # m just before each block
    carried = beta**block
    for b in range(1, blocks):
        carry_in[b] = within[b - 1, -1] + carried * carry_in[b - 1]
    m = (within + np.outer(carry_in, beta * decay)).ravel()[:n]
    return m / (1.0 - beta ** np.arange(1, n + 1, dtype=np.float64))


class Overlay:
    """One other run's curves, ready to be drawn against any of the loss panel's x axes."""

    def __init__(self, curves: RunCurves) -> None:
        self.curves = curves
        self.name = curves.name
        self.key = str(curves.run_dir)  # what its colour is kept for
        finite = np.isfinite(curves.loss)
        # the run's own arrays where every loss is finite (no copies of a million steps)
        keep = slice(None) if finite.all() else finite
        self._loss = np.asarray(curves.loss, dtype=np.float64)[keep]
        self._x = {
            "steps": np.asarray(curves.step, dtype=np.float64)[keep],
            "tokens": np.asarray(curves.tokens, dtype=np.float64)[keep],
            # a clock that never runs back, so every axis is sorted for searchsorted
            "time": _non_decreasing(np.asarray(curves.train_s, dtype=np.float64)[keep]),
        }
        self._val_x = {
            "steps": np.asarray(curves.val_step, dtype=np.float64),
            "tokens": np.asarray(curves.val_tokens, dtype=np.float64),
            "time": _non_decreasing(np.asarray(curves.val_train_s, dtype=np.float64)),
        }
        self._val_loss = np.asarray(curves.val_loss, dtype=np.float64)
        self.tokenizer = curves.tokenizer
        self.unit = TokenUnit(curves.tokenizer, curves.val_bpb_per_loss)
        # bits per byte per nat of loss, per split: None for a run recorded before them
        self._per_loss = {"loss": (1.0, 1.0), "bpb": (curves.train_bpb_per_loss, curves.val_bpb_per_loss)}
        self._smoothed: dict[tuple[float, str], np.ndarray] = {}
        self._cache: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.downsamplings = 0  # how often a downsampling was computed, not taken from the cache

    def __len__(self) -> int:
        return len(self._loss)

    def xs(self, axis: str) -> np.ndarray:
        """Every finite step's x on `axis` (sorted)."""
        return self._x[axis]

    def has_unit(self, unit: str) -> bool:
        """Whether it can be drawn in `unit` (bits per byte: only a run that recorded them)."""
        return None not in self._per_loss[unit]

    def train(self, smoothing: float, unit: str = "loss") -> np.ndarray:
        """Every finite step's train loss in `unit`, smoothed with `smoothing` (0.0: the raw
        loss); computed once per smoothing and unit (empty where the unit is not known)."""
        key = (smoothing, unit)
        if key not in self._smoothed:
            scale = self._per_loss[unit][0]
            if scale is None:
                self._smoothed[key] = np.zeros(0)
            elif unit == "loss":
                self._smoothed[key] = debiased_ema(self._loss, smoothing)
            else:
                self._smoothed[key] = self.train(smoothing) * scale
        return self._smoothed[key]

    def val(self, axis: str, unit: str = "loss") -> tuple[np.ndarray, np.ndarray]:
        scale = self._per_loss[unit][1]
        if scale is None:
            return np.zeros(0), np.zeros(0)
        return self._val_x[axis], self._val_loss * scale if unit != "loss" else self._val_loss

    def value_at(self, x: float, axis: str, smoothing: float, unit: str = "loss") -> float | None:
        """Its (smoothed) train loss in `unit` at x on `axis`: that of its last step at or before x.

        None before its first step, and past its last step by more than one of its steps
        (its mean x per step): it never got there, and its last value would look like a
        value at x. On the steps axis that is: at most one step past its end."""
        xs = self._x[axis]
        if len(xs) == 0 or not math.isfinite(x):
            return None
        at = int(np.searchsorted(xs, x, side="right")) - 1
        if at < 0:
            return None
        per_step = (xs[-1] - xs[0]) / (len(xs) - 1) if len(xs) > 1 else 0.0
        if at == len(xs) - 1 and x > xs[-1] + per_step:
            return None
        if not self.has_unit(unit):
            return None  # never a made-up value: it recorded no bits per byte
        return float(self.train(smoothing, unit)[at])

    @property
    def last_step(self) -> int | None:
        """Its last step with a finite loss (None: it has none)."""
        steps = self._x["steps"]
        return int(steps[-1]) if len(steps) else None

    def past_end(self, x: float, axis: str) -> bool:
        """Whether `x` on `axis` lies beyond its last step (it ended before getting there)."""
        xs = self._x[axis]
        return bool(len(xs)) and math.isfinite(x) and x > xs[-1]

    def end_value(self, smoothing: float, unit: str = "loss") -> float | None:
        """Its (smoothed) train loss in `unit` at its last step (None: none in that unit)."""
        train = self.train(smoothing, unit) if self.has_unit(unit) else np.zeros(0)
        return float(train[-1]) if len(train) else None

    def same_curve_as(self, other: Overlay) -> bool:
        """Whether its losses are `other`'s, step for step, over its whole length: two runs of
        one preset and seed (one maybe shorter) draw one line, the later one over the other."""
        n = len(self)
        if n == 0 or n > len(other) or self.tokenizer != other.tokenizer:  # other tokens: not one line
            return False
        return bool(
            np.array_equal(self._x["steps"], other._x["steps"][:n])
            and np.allclose(self._loss, other._loss[:n], rtol=1e-6, atol=0.0)
        )

    def downsampled(
        self, axis: str, smoothing: float, x0: float, x1: float, columns: int, unit: str = "loss"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(line xs, line ys, val xs, val ys) inside [x0, x1] in `unit`, at most two points a
        column, cached: the same axes give the same arrays without any work. Nothing in a unit
        the run did not record."""
        key = (axis, smoothing, x0, x1, columns, unit)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        self.downsamplings += 1
        train = self.train(smoothing, unit)
        lx, ly = _window(self._x[axis], train, x0, x1) if len(train) else (train, train)
        lx, ly = downsample_minmax(lx, ly, columns, (x0, x1))
        val_x, val_y = self.val(axis, unit)
        vx, vy = _window(val_x, val_y, x0, x1)
        vx, vy = downsample_minmax(vx, vy, max(4, columns // 2), (x0, x1))
        out = (np.asarray(lx), np.asarray(ly), np.asarray(vx), np.asarray(vy))
        if len(self._cache) >= CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))  # the oldest axes
        self._cache[key] = out
        return out


def _non_decreasing(xs: np.ndarray) -> np.ndarray:
    """`xs`, each value at least the one before (NaN: as the one before); as is if it was."""
    if len(xs) == 0 or (np.all(np.isfinite(xs)) and np.all(xs[1:] >= xs[:-1])):
        return xs
    return np.maximum.accumulate(np.where(np.isfinite(xs), xs, -np.inf))


def _window(xs: np.ndarray, ys: np.ndarray, x0: float, x1: float) -> tuple[np.ndarray, np.ndarray]:
    """The points with x0 <= x <= x1 (xs sorted): a long overlay past a young run's end costs
    nothing beyond it."""
    lo = int(np.searchsorted(xs, x0, side="left"))
    hi = int(np.searchsorted(xs, x1, side="right"))
    return xs[lo:hi], ys[lo:hi]


class ColourBook:
    """Colours for overlaid runs: given in the order runs are overlaid, kept for a run while it
    stays overlaid (taking one away recolours no other), the first free one for a newcomer."""

    def __init__(self, colours: tuple[RGB, ...] = OVERLAY_COLOURS) -> None:
        self.colours = colours
        self._given: dict[str, int] = {}  # run key -> index into colours

    def assign(self, keys: list[str]) -> list[RGB]:
        """The colours of `keys` (the runs overlaid now, in order); forgets runs not in it."""
        self._given = {k: i for k, i in self._given.items() if k in keys}
        for key in keys:
            if key not in self._given:
                used = list(self._given.values())
                free = [i for i in range(len(self.colours)) if i not in used]
                # more runs than colours: the least used colour again
                self._given[key] = free[0] if free else min(
                    range(len(self.colours)), key=lambda i: (used.count(i), i)
                )
        return [self.colours[self._given[k]] for k in keys]


@dataclass(frozen=True)
class LegendEntry:
    name: str
    colour: RGB
    value: float | None  # its loss at the current run's x (None: it has none there)
    # the step it ended at, when the current run's x is past its end: `value` is its last loss
    ended_at: int | None = None
    # the overlay whose curve is its own (the same preset and seed), up to `same_until` (the
    # shorter one's last step; None: both as long): drawn as one line, it is named instead
    same_as: str | None = None
    same_until: int | None = None


def shorten(name: str, width: int) -> str:
    """`name` in at most `width` characters: its start and its end (where run names differ:
    a timestamp, a branch's suffix) around an ellipsis."""
    if len(name) <= width:
        return name
    if width <= 1:
        return name[:width]
    head = (width - 1) * 2 // 5
    return name[:head] + "…" + name[len(name) - (width - 1 - head) :]


def legend(current: float | None, entries: list[LegendEntry], width: int) -> str:
    """The loss panel's legend with overlays, as markup in at most `width` visible characters.

    `now 2.451 · base 2.398 +0.053 · fork 2.462 -0.011 · +2 more`: the current run's loss
    at its newest step, then each overlay's name and its loss at the same x in its colour, and
    the current run's loss minus that one: positive (red) means the current run is behind it,
    negative (green) ahead. Where they do not all fit, names get shorter, then the last runs
    give way to "+N more". Losses to 3 decimals, like the differences, to fit 80 columns."""
    head_text = f"now {_fmt(current)}"
    head = (head_text, f"[$primary]{_escape(head_text)}[/]")
    # names of 7 or more first (fewer runs rather than unreadable names), then down to 4
    for name_widths in ((32, 20, 14, 10, 7), (5, 4)):
        for shown in range(len(entries), 0, -1):
            for name_width in name_widths:
                parts = [head, *(_entry(e, current, name_width) for e in entries[:shown])]
                if shown < len(entries):
                    more = f"+{len(entries) - shown} more"
                    parts.append((more, f"[$foreground-muted]{more}[/]"))
                if len(" · ".join(p for p, _ in parts)) <= width:
                    return " · ".join(m for _, m in parts)
    more = f"+{len(entries)} more"
    if entries and len(f"{head_text} · {more}") <= width:
        return f"{head[1]} · [$foreground-muted]{more}[/]"
    return head[1] if len(head_text) <= width else ""


def _entry(entry: LegendEntry, current: float | None, name_width: int) -> tuple[str, str]:
    """(plain text, markup) of one overlay in the legend: `name 2.398 +0.053` (its loss at the
    current run's x and the difference), `name 2.401@300` (it ended at step 300: its last loss,
    no difference at another x), `name ≡ other to 300` (its curve is the other's)."""
    name = shorten(entry.name, name_width)
    colour = "#{:02x}{:02x}{:02x}".format(*entry.colour)
    if entry.same_as is not None:
        until = f" to {fmt_tick(entry.same_until)}" if entry.same_until is not None else ""
        text = f"{name} ≡ {shorten(entry.same_as, name_width)}{until}"
        return text, f"[{colour}]{_escape(text)}[/]"
    value = _fmt(entry.value)
    if entry.ended_at is not None and entry.value is not None:
        text = f"{name} {value}@{fmt_tick(entry.ended_at)}"
        return text, f"[{colour}]{_escape(text)}[/]"
    text, markup = f"{name} {value}", f"[{colour}]{_escape(name)} {value}[/]"
    if entry.value is not None and current is not None:
        diff = current - entry.value
        if math.isfinite(diff):
            shown = f"{diff:+.3f}"
            if float(shown) == 0:  # level at the shown precision: neither ahead nor behind
                shown, diff = "±0.000", 0.0
            style = "$error" if diff > 0 else "$success" if diff < 0 else "$foreground-muted"
            text += f" {shown}"
            markup += f" [{style}]{shown}[/]"
    return text, markup


# Runs whose val bits per byte per nat of loss differ by more than this have tokens that stand
# for different amounts of text (a char-level and a BPE run differ 3-4 times; two BPE encodings
# about 10%; one tokenizer on one corpus not at all): their losses per token are not comparable.
TOKEN_SIZE_TOLERANCE = 0.05


@dataclass(frozen=True)
class TokenUnit:
    """What a run's loss is per: its tokenizer and its val split's bits per byte per nat of
    loss (each None where the run does not say)."""

    tokenizer: str | None
    bpb_per_loss: float | None


def units_differ(a: TokenUnit, b: TokenUnit) -> bool:
    """Whether two runs' losses are per different units of text: by their measured tokens per
    byte where both recorded it, else by their tokenizers' names."""
    if a.bpb_per_loss and b.bpb_per_loss:
        return abs(a.bpb_per_loss / b.bpb_per_loss - 1) > TOKEN_SIZE_TOLERANCE
    return bool(a.tokenizer and b.tokenizer and a.tokenizer != b.tokenizer)


def tokenizer_note(units: list[TokenUnit], width: int) -> str | None:
    """One line, in at most `width` characters, when runs whose tokens stand for different
    amounts of text (different tokenizers) are compared by their loss: bits per byte compare
    them. None when they are all alike (or nothing says otherwise)."""
    if not any(units_differ(a, b) for i, a in enumerate(units) for b in units[i + 1 :]):
        return None
    known = sorted({u.tokenizer for u in units if u.tokenizer})
    what = f"tokenizers differ ({', '.join(known)})" if len(known) > 1 else "token sizes differ"
    for text in (
        f"{what}: per-token losses are not comparable; compare bits per byte (cockpit compare --bpb)",
        f"{what}: losses not comparable; use --bpb",
        "tokenizers differ: losses not comparable; use --bpb",
    ):
        if len(text) <= width:
            return text
    return None


def _fmt(loss: float | None) -> str:
    return fmt_loss(loss) if loss is None or not math.isfinite(loss) else f"{loss:.3f}"


def _escape(text: str) -> str:
    """Text shown as is in Textual markup (a run called `[x]` is not a tag)."""
    return text.replace("\\", "\\\\").replace("[", "\\[")
