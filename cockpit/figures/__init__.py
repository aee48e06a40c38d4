"""Pure helpers behind the app (no Textual, no torch): series maths, axes, text, live settings."""
