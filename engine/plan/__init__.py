"""The pre-flight plan: memory breakdown, FLOPs and MFU, the planner and its fixes."""
