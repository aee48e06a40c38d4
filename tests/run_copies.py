"""A trained run copied where a test may change it: one real run trained once per module, each
test given its own copy, as if it had been trained there (cheaper than training again)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# the run's own files that name its directory (its records and summary hold absolute paths)
TEXT_FILES = {"metrics.jsonl", "summary.json", "config.toml", "config.json", ".run.lock"}


def copy_run(trained: Path, target: Path) -> Path:
    """`trained` copied to `target` (which must not exist): the files that name the run's
    directory name `target` instead and files hard-linked together stay linked."""
    target.mkdir(parents=True)
    linked: dict[tuple[int, int], Path] = {}
    for source in sorted(trained.iterdir()):
        if source.is_dir():
            shutil.copytree(source, target / source.name)
            continue
        copy = target / source.name
        if source.name in TEXT_FILES:
            text = source.read_text(encoding="utf-8")
            copy.write_text(text.replace(str(trained), str(target)), encoding="utf-8")
            shutil.copystat(source, copy)
            continue
        stat = source.stat()
        inode = (stat.st_dev, stat.st_ino)
        if inode in linked:
            os.link(linked[inode], copy)  # e.g. best.pt and the checkpoint it is
        else:
            shutil.copy2(source, copy)
            linked[inode] = copy
    return target
