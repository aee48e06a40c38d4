"""A run's corpus: sources, streaming preparation, the token cache, tokenizers and batches."""
