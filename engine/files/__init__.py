"""A run's files and the directories they are in (torch-free): the safe writers every file of a
run, an export or the data cache goes through (`writes`), and the rules that make a directory
private (`private_dirs`: ours alone, below directories no one else can swap)."""

from engine import lazy_exports

_EXPORTS = {
    "engine.files.writes": (
        "FILE_MODE",
        "PRIVATE_MODE",
        "DIR_MODE",
        "fsync_dir",
        "temp_path",
        "make_temp",
        "make_temp_dir",
        "atomic_file",
        "atomic_write",
        "atomic_write_text",
        "atomic_write_by_name",
        "open_kept_file",
        "refusal",
        "create_new",
        "open_for_append",
    ),
    "engine.files.private_dirs": (
        "PRIVATE_DIR_MODE",
        "Unsafe",
        "make_private_dir",
        "make_dirs_above",
        "remove_made",
        "own_dir_problem",
        "trusted_dir_problem",
        "refusal_line",
        "foreign_entry_problem",
        "parents_problem",
        "future_parents_problem",
    ),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
