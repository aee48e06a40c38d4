"""The error of a checkpoint that cannot be used, shared by every part that reads one, and the
errors a damaged file raises on its way in.

Torch-free: a caller can catch it without loading torch.
"""

from __future__ import annotations

import pickle
import struct
import zipfile


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the run; the message is for the user."""


# What torch.load and an unpickler raise for bytes that are not a whole file of theirs (found by
# truncating and garbling checkpoints, zip and legacy, and plain pickles); UnicodeDecodeError
# is a ValueError, UnpicklingError covers torch's weights-only refusals.
DAMAGED_FILE_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    EOFError,
    RuntimeError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    AssertionError,
    OverflowError,
    MemoryError,
    struct.error,
    pickle.UnpicklingError,
    zipfile.BadZipFile,
)
