"""A run's directory: lock, metrics log and its readers, summary, history, journal, sinks."""
