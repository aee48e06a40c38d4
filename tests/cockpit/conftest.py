"""What every app test here shares: fewer garbage collections while it runs."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

# A Textual app makes and drops many small objects: at Python's default (a young collection
# every 700 allocations, ~200 in one app test, each also walking the older generations now and
# then, which hold torch's objects) collecting took ~30% of an app test's CPU; one every 10,000
# takes ~7%. What is collected is the same, later.
YOUNG_COLLECTION_EVERY = 10_000


@pytest.fixture(autouse=True)
def _fewer_collections() -> Iterator[None]:
    threshold = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
