"""A run's configuration: typed dataclasses, TOML presets, validation with one-line errors."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.config.run_config": ("RunConfig", "DataConfig", "ModelConfig", "OptimConfig", "ScheduleConfig", "TrainConfig", "EvalConfig", "SampleConfig", "CheckpointConfig", "LogConfig", "ConfigError", "MAX_LR", "MIN_TEMPERATURE"),
    "engine.config.loading": ("config_from_dict", "parse_override", "recorded_config", "split_micro_batch"),
    "engine.config.presets": ("DEFAULT_PRESET", "discover", "extends_chain", "load_preset", "load_replay", "Replay", "search_dirs"),
    "engine.config.replay": ("check_replay", "replayed_change", "ReplayedChange"),
    "engine.config.byte_sizes": ("format_bytes", "parse_size"),
    "engine.config.to_toml": ("config_to_toml",),
    "engine.config.user_files": ("UserFileError", "check_regular_file", "open_regular_file", "read_small_text"),
    "engine.config.timeline": ("SettingsTimeline", "TimedChange"),
    "engine.config.live": ("LIVE_SETTINGS", "COOLDOWN", "LR_SCALE", "SettingsChange", "canonical_key", "describe", "live_change", "refusal", "setting_value", "wsd_decay_start"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
