"""Checkpoints: names, atomic save, restore, DCP shards, the rules of a resume."""
