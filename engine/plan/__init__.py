"""The pre-flight plan: memory breakdown, FLOPs and MFU, the planner and its fixes."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.plan.planner": ("MemoryPlan", "compute_dtype", "plan_memory", "vocab_size_for"),
    "engine.plan.fixes": ("suggest_fixes",),
    "engine.plan.report": ("format_plan",),
    "engine.plan.flops": ("flops_per_token", "matmul_params", "measure_peak", "table_peak"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
