"""The wire protocol of a run's control socket: JSON lines, one object per line, UTF-8.

The server sends a hello, the replay of the run so far, `{"kind": "live"}`, then every event as
`Event.to_record()` writes it and a reply to each command; a client sends `{"cmd": NAME, "id":
ID, ...arguments}`, the EngineHandle's commands. docs/reference/wire.md is the full protocol.
Torch-free and textual-free, like engine.events: a client needs only this and the events.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

from engine.checkpoint.names import CHECKPOINT_NAME
from engine.config.run_config import MAX_LR

PROTOCOL = 1
SOCKET_NAME = "control.sock"
MAX_LINE_BYTES = 1 << 20  # a longer line is refused (and the connection closed): not a command
# Arrays and objects inside one another a message may hold: the deepest record (run_started's
# config) has a handful; one near Python's recursion limit parses, but its echo (a command's id
# in the reply) could not be encoded again.
MAX_DEPTH = 32

# command -> its arguments and their types; a command with other arguments is refused
COMMANDS: dict[str, dict[str, type]] = {
    "pause": {},
    "resume": {},
    "checkpoint": {},
    "sample": {},
    "evaluate": {},
    "set_lr": {"lr": float},
    "scale_lr": {"factor": float},
    "stop": {"checkpoint": bool, "reason": str},
    "rollback": {"lr_factor": float, "checkpoint": str},
    "set": {"settings": dict},
}
REQUIRED = {"set_lr": ("lr",), "scale_lr": ("factor",), "set": ("settings",)}
MAX_KEY_CHARS = 100  # a setting's name ("optim.weight_decay"); a longer one is no setting
MAX_REASON_CHARS = 200  # a stop's reason: it ends up in the final state record, on one line


class WireError(ValueError):
    """A line that is not a valid message; the text is the one line the peer is told."""


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line of strict JSON (no NaN or Infinity: they are null on the wire)."""
    return (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    """One received line as a JSON object; WireError for anything else."""
    if len(line) > MAX_LINE_BYTES:
        raise WireError(f"line of {len(line):,} bytes is over the {MAX_LINE_BYTES:,}-byte limit")
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"not a JSON line ({e})") from None
    except ValueError:  # Python's int parsing refuses over sys.int_info's digit limit
        digits = sys.get_int_max_str_digits()
        raise WireError(f"an integer of over {digits:,} digits: no command takes one") from None
    except RecursionError:  # json's parser recurses per bracket
        raise WireError("JSON nested too deep: no message of this protocol is") from None
    if not isinstance(message, dict):
        raise WireError(f"expected a JSON object, got {type(message).__name__}")
    if _too_deep(message, MAX_DEPTH):
        raise WireError(f"JSON nested over {MAX_DEPTH} deep: no message of this protocol is")
    return message


def _too_deep(value: Any, limit: int) -> bool:
    """Whether `value` holds arrays or objects more than `limit` levels deep (walked with a
    stack, not by recursion: the value may be as deep as the parser allowed)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def command(name: str, id: Any = None, **arguments: Any) -> dict[str, Any]:
    """A client's command message (checked as the server will check it)."""
    message = {"cmd": name, "id": id, **arguments}
    parse_command(message)
    return message


def parse_command(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(command, keyword arguments) of a client message; WireError when it is not one the
    engine takes: unknown name, unknown or missing arguments, wrong types, non-finite numbers."""
    name = message.get("cmd")
    if name not in COMMANDS:
        known = ", ".join(COMMANDS)
        raise WireError(f"unknown command {_short(name)}; the commands are {known}")
    expected = COMMANDS[name]
    arguments = {k: v for k, v in message.items() if k not in ("cmd", "id")}
    for key, value in arguments.items():
        if key not in expected:
            raise WireError(f"{name}: unknown argument {_short(key)}")
        kind = expected[key]
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise WireError(f"{name}: {key} must be a number, got {_short(value)}")
            try:
                number = float(value)
            except OverflowError:  # an integer beyond any float
                digits = len(str(abs(value)))
                raise WireError(
                    f"{name}: {key} must be a finite number, got an integer of {digits:,} digits"
                ) from None
            if not math.isfinite(number):
                raise WireError(f"{name}: {key} must be finite, got {value!r}")
            arguments[key] = number
        elif kind is dict:
            if not isinstance(value, dict):
                raise WireError(f"{name}: {key} must be an object, got {_short(value)}")
            arguments[key] = settings_of(value)
        elif not isinstance(value, kind):
            raise WireError(f"{name}: {key} must be {kind.__name__}, got {_short(value)}")
    missing = [key for key in REQUIRED.get(name, ()) if key not in arguments]
    if missing:
        raise WireError(f"{name}: missing {', '.join(missing)}")
    for key, value in arguments.items():
        check = VALUE_CHECKS.get((name, key))
        problem = check(value) if check is not None else None
        if problem is not None:
            raise WireError(f"{name}: {key} {problem}")
    return name, arguments


# What a value must be beyond its type, checked on receipt: a value no run could take is refused
# in the reply, not acknowledged and then refused by an alert. What depends on the run (an LR
# factor that takes the schedule past MAX_LR, a checkpoint that is no longer the newest) is
# decided at the step boundary. Each check returns why the value is wrong, or None.
def _an_lr(value: float) -> str | None:
    return None if 0 < value <= MAX_LR else f"must be an LR in (0, {MAX_LR:g}], got {value:g}"


def _a_factor(value: float) -> str | None:
    return None if value > 0 else f"must be a factor greater than 0, got {value:g}"


def _a_checkpoint_name(value: str) -> str | None:
    if CHECKPOINT_NAME.match(value):
        return None
    return f"must be a checkpoint's file name, e.g. ckpt-00000100.pt, got {_short(value)}"


def _a_reason(value: str) -> str | None:
    if len(value) > MAX_REASON_CHARS:
        return f"must be at most {MAX_REASON_CHARS} characters, got {len(value):,}"
    if not value.isprintable():
        return f"must be printable text on one line, got {_short(value)}"
    return None


VALUE_CHECKS: dict[tuple[str, str], Callable[[Any], str | None]] = {
    ("set_lr", "lr"): _an_lr,
    ("scale_lr", "factor"): _a_factor,
    ("rollback", "lr_factor"): _a_factor,
    ("rollback", "checkpoint"): _a_checkpoint_name,
    ("stop", "reason"): _a_reason,
}


def settings_of(settings: dict[str, Any]) -> dict[str, Any]:
    """A `set`'s settings as the engine takes them: at least one, each a key as `--set` spells
    it and a JSON scalar (a finite number, a string, true, false, null) or a list of strings
    (sample.prompts); the engine decides whether each may change."""
    if not settings:
        example = '{"optim.weight_decay": 0.0}'
        raise WireError(f"set: settings is empty; name at least one, e.g. {example}")
    wrong = "must be a scalar or a list of strings, got"
    for key, value in settings.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
            raise WireError(f"set: {_short(key)} is not a setting's name")
        if isinstance(value, float) and not math.isfinite(value):  # 1e400 parses as inf
            raise WireError(f"set: {key} must be finite, got {value!r}")
        if isinstance(value, list):
            if not all(isinstance(item, str) for item in value):
                raise WireError(f"set: {key} {wrong} {_short(value)}")
        elif value is not None and not isinstance(value, (bool, int, float, str)):
            raise WireError(f"set: {key} {wrong} {_short(value)}")
    return dict(settings)


def _short(value: Any, limit: int = 60) -> str:
    """A peer's value in a refusal: its repr cut to `limit` characters (a refusal stays one
    short line however long the value)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
