"""What a corpus preparation's progress reads like, one line, for the headless output, the app's
progress panel and `cockpit data prepare` alike (pure: no Textual)."""

from __future__ import annotations

from cockpit.figures.durations import fmt_duration
from cockpit.figures.numbers import fmt_bytes, fmt_int, fmt_si
from engine.events import DataProgress


def progress_figures(ev: DataProgress) -> str:
    """'1.16 GiB/3.73 GiB (31%) | 812,345 docs | 290M tokens | 20.3 MB/s | ETA 2:15'."""
    read = fmt_bytes(ev.bytes_read)
    if ev.bytes_total:
        read = f"{read}/{fmt_bytes(ev.bytes_total)} ({100 * (ev.fraction or 0.0):.0f}%)"
    parts = [read, f"{fmt_int(ev.documents)} docs"]
    if ev.skipped:
        parts.append(f"{fmt_int(ev.skipped)} skipped")
    parts += [f"{fmt_si(ev.tokens)} tokens", f"{ev.mb_per_s:.1f} MB/s"]
    if ev.done:
        parts.append(f"took {fmt_duration(ev.elapsed_s)}")
    else:
        parts.append(f"ETA {fmt_duration(ev.eta_s)}")
    return " | ".join(parts)


def progress_line(ev: DataProgress) -> str:
    """The headless line: what is prepared, with which tokenizer, and the figures."""
    if ev.reused:
        return f"data      | {ev.source}: prepared earlier ({ev.tokenizer}), {fmt_int(ev.tokens)} tokens"
    what = "prepared" if ev.done else "preparing"
    note = f" | {ev.note}" if ev.note else ""  # e.g. waiting for another process, or cuts
    return f"data      | {what} {ev.source} ({ev.tokenizer}): {progress_figures(ev)}{note}"
