"""A run's directory: lock, metrics log and its readers, summary, history, journal, the digest of
a time away, sinks, and the notifications a run sends (what deserves one, the endpoints, the senders)."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.rundir.layout": (
        "check_new_run_dir", "check_private_place", "check_run_dir", "create_default_run_dir",
        "create_run_dir", "default_run_dir", "make_private_place", "open_run_dir",
    ),
    "engine.rundir.lock": ("check_not_in_use",),
    "engine.rundir.metrics_log": ("MetricsWriter", "read_records"),
    "engine.rundir.summary": ("METRICS_NAME", "read_summary", "size_on_disk"),
    "engine.rundir.summary_facts": ("RunSummary", "facts_problem"),
    "engine.rundir.history": ("RunCurves", "read_curves", "run_tokenizer"),
    "engine.rundir.sample_records": ("read_samples",),
    "engine.rundir.journal": ("Entry", "JournalTail"),
    "engine.rundir.digest": (
        "AWAY_MIN_S", "Digest", "Noted", "away_digest", "digest", "digest_lines", "last_detach",
        "parse_duration", "read_digest",
    ),
    "engine.rundir.recorded": ("RecordedRun",),
    "engine.rundir.sinks": ("summary_writer_class",),
    "engine.rundir.metrics_endpoint": ("check_metrics_port",),
    "engine.rundir.listing": (
        "CRASHED", "FORKED", "LIVE", "UNREADABLE", "ListedRun", "engine_holds", "find_run_dirs",
        "list_run", "list_runs",
    ),
    "engine.rundir.notices": ("FAULT_CODES", "KINDS", "STALL_FACTOR", "STALL_MIN_S", "Notice", "StallWatch", "action_notice", "notice_for"),
    "engine.rundir.notify_endpoints": ("FORMATS", "Endpoint", "infer_format", "load_notify_file", "notify_file", "parse_endpoint", "redact"),
    "engine.rundir.notify_senders": ("Notifications", "request_for"),
    "engine.rundir.branch": ("FORK_FILE", "ForkError", "NothingToTrain", "branch_overrides", "carried_changes", "make_fork"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
