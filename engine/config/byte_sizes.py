"""Sizes in bytes as people write them: `--device-memory 24GB` read, `1.50 GiB` written.

GB and GiB both mean 1024^3 here, as GPU memory is sold and as torch reports it.
"""

from __future__ import annotations

import re

from engine.config.run_config import ConfigError

GIB = 1024**3
MIN_DEVICE_MEMORY = 1024**2  # below this, --device-memory is a typo (0, or 24 meant as 24GB)


def parse_size(text: str) -> int:
    """'24GB', '24 GiB', '80g', '512MB' -> bytes (GB and GiB both mean 1024^3, as GPUs are sold)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise ConfigError(f"--device-memory {text!r}: expected a size like 24GB or 80GiB")
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": GIB, "t": 1024**4}[m.group(2)]
    size = int(float(m.group(1)) * scale)
    if size < MIN_DEVICE_MEMORY:  # 0, or bytes meant as GB: a plan against it says nothing
        raise ConfigError(
            f"--device-memory {text!r}: {format_bytes(size)} is no device's memory; "
            "give a size of at least 1 MiB, like 24GB or 80GiB"
        )
    return size


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"
