"""A run's corpus: sources, streaming preparation, the token cache, tokenizers and batches."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.data.errors": ("DataError", "PreparationStopped"),
    "engine.data.preparation": ("data_available", "is_stand_in_corpus", "prepare"),
    "engine.data.locator": ("resolve_source",),
    "engine.data.resumed_corpus": ("resume_data_path",),
    "engine.data.cache": ("CacheError", "find_prepared", "list_prepared", "remove_prepared"),
    "engine.data.cache_dirs": ("default_cache_dir",),
    "engine.data.shape_schedule": ("tokens_through",),
    "engine.data.tokenizers": ("check_tokenizer_loads",),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
