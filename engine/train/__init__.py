"""The Trainer: the loop, read top to bottom, and the parts it is built from."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.train.trainer": ("Trainer",),
    "engine.train.device": ("autocast_context", "device_capacity", "select_device", "select_dtype"),
    "engine.train.threads": ("apply_threads",),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
