"""Keeping the cyclic garbage collector's full collections out of a live run."""

from __future__ import annotations

import gc


def settle_garbage_collector() -> None:
    """Take everything alive now (modules, model, optimizer, the UI's widgets) out of the cyclic
    garbage collector's reach, after collecting what a previous run left behind.

    A full collection walks every tracked object with the GIL held: with torch and Textual
    loaded that is ~250k objects and ~80 ms, during which neither training nor the UI moves
    (measured: the redraw benchmark's p95 outliers and late pause acknowledgements). Frozen
    objects are still freed by reference counting; only cycles among them would outlive the
    run, and the next run's call collects those (it unfreezes first).
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
