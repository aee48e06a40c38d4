"""The GPT and what trains and measures it: optimizers, LR schedules, sampling, evaluation."""
