"""The GPT, its chunked head loss, its float8 layers, and what runs it: sampling and evaluation."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.model.gpt": ("GPT", "attention_is_fused", "padded_vocab_size"),
    "engine.model.head_loss": ("chunk_tokens_for",),
    "engine.model.float8": ("check_float8", "convert_to_float8", "float8_refusal"),
    "engine.model.sampling": ("PromptError", "SamplingOptions", "encode_prompt", "generate_tokens", "stream_text"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
