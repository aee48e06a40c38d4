"""Checkpoints: names, atomic save, restore, DCP shards, the rules of a resume."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.checkpoint.names": ("latest_checkpoint", "list_checkpoints", "step_of"),
    "engine.checkpoint.store": ("CheckpointError", "is_sharded", "load_checkpoint"),
    "engine.checkpoint.resume": ("ResumeFinished", "plan_resume"),
    "engine.checkpoint.trained": ("TrainedModel", "load_trained"),
    "engine.checkpoint.init_source": (
        "REQUIRED", "InitFromError", "required_refusal", "same_source", "source_path",
    ),
    "engine.checkpoint.init_from": ("open_source",),
    "engine.checkpoint.init_weights": ("WeightsSource",),
    "engine.checkpoint.source_fit": (
        "check_fits", "check_tokenizer_name", "load_into", "shaped_overrides",
    ),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
