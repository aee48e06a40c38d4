"""The optimizers (AdamW, Muon, Lion, Adafactor, SGD), the refused-step convention, LR schedules."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.optim.optimizers": ("build_optimizer",),
    "engine.optim.sgd": ("SGD",),
    "engine.optim.schedule": ("LrChange", "LrPlan", "lr_change", "lr_plan", "planned_curve"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
