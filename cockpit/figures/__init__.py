"""Pure helpers behind what is drawn (no Textual, no torch): series maths, axes, text."""
