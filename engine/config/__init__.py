"""A run's configuration: typed dataclasses, TOML presets, validation with one-line errors."""
