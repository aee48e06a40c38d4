"""The Trainer: the loop, read top to bottom, and the parts it is built from."""
