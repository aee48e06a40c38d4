"""`cockpit ablate`'s series (no Textual, no torch): its spec, its record under runs/, its table.

The spec is a baseline preset and the changes measured against it; the record, which run of
the series is done and which resumes; the table, the results read from the runs' metrics files.
The CLI and the app drive a series; nothing here starts a run.
"""
