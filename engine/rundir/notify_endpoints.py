"""Where notices go: endpoints from the user's notify.toml (beside the user presets, under
$XDG_CONFIG_HOME/cockpit/) and from `--notify [FORMAT:]URL`, each checked before the run
starts (a ConfigError: one line naming the problem and the fix). A URL's path and query often
are its secret (a webhook's token, an ntfy topic): `redact` keeps only its scheme and host
for every message that shows one."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.config.run_config import ConfigError
from engine.config.user_files import read_small_text
from engine.rundir.notices import FAULT_CODES, KINDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FORMATS = ("json", "ntfy", "slack", "discord")
GUIDE = "see docs/guide/notifications.md"


def notify_file() -> Path:
    """$XDG_CONFIG_HOME/cockpit/notify.toml (~/.config when XDG_CONFIG_HOME is unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "cockpit" / "notify.toml"


def redact(url: str) -> str:
    """`url` without what may be secret: its user, path and query ('https://hooks.slack.com/…')."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if _port(parts) else ""
    hidden = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


def _shown(text: str, host: str | None) -> str:
    """What a refusal may show of a URL that may not parse: redacted, or its first part."""
    if host:
        return redact(text)
    head, slash, _ = text.partition("/")
    return repr(head[:40] + ("/…" if slash else ""))


def _port(parts: Any) -> int | None:
    try:
        return parts.port
    except ValueError:  # a port that is no number: refused by parse_endpoint
        return None


def infer_format(url: str) -> str:
    """The format a URL's host implies: Slack's and Discord's webhooks, ntfy.sh (or a host named
    ntfy.*); any other URL gets the generic JSON."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host == "hooks.slack.com":
        return "slack"
    if host in ("discord.com", "discordapp.com") and parts.path.startswith("/api/webhooks/"):
        return "discord"
    if host == "ntfy.sh" or host.startswith("ntfy."):
        return "ntfy"
    return "json"


@dataclass(frozen=True)
class Endpoint:
    """A URL notices are POSTed to, in `format`, for the kinds in `events` (None: every kind)."""

    url: str
    format: str
    events: frozenset[str] | None = None

    @property
    def shown(self) -> str:
        return redact(self.url)

    def wants(self, kind: str) -> bool:
        if self.events is None:
            return True
        return kind in self.events or ("fault" in self.events and kind in FAULT_CODES)


def _checked_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{where}: {_shown(url, parts.hostname)} is not an http(s) URL; "
            "give one such as https://ntfy.sh/TOPIC or FORMAT:URL (" + GUIDE + ")"
        )
    try:
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        raise ConfigError(
            f"{where}: {redact(url)} has a port that is not a number; fix the URL"
        ) from None
    return url


def parse_endpoint(text: str, where: str = "--notify") -> Endpoint:
    """An endpoint from `--notify`'s [FORMAT:]URL: the format named, else inferred from the URL."""
    text = text.strip()
    head, colon, rest = text.partition(":")
    if colon and head.lower() in FORMATS:
        url, fmt = rest, head.lower()
    elif colon and rest.startswith(("http://", "https://")):
        raise ConfigError(
            f"{where}: unknown format {head!r}; the formats are {', '.join(FORMATS)} "
            "(--notify FORMAT:URL), or give the URL alone"
        )
    else:
        url, fmt = text, infer_format(text)
    return Endpoint(_checked_url(url, where), fmt)


def _endpoint_from_table(table: Any, where: str) -> Endpoint:
    if not isinstance(table, dict):
        raise ConfigError(f'{where} must be a table ([[endpoint]] with url = "..."); {GUIDE}')
    unknown = sorted(set(table) - {"url", "format", "events"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; the keys are url, format, events")
    url = table.get("url")
    if not isinstance(url, str) or not url:
        raise ConfigError(f'{where}: url is missing; add url = "https://..."')
    fmt = table.get("format", infer_format(url))
    if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
        raise ConfigError(f"{where}: format {fmt!r} is not one of {', '.join(FORMATS)}; pick one")
    events = table.get("events")
    kinds: frozenset[str] | None = None
    if events is not None:
        known = (*KINDS, "fault")
        if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
            raise ConfigError(
                f'{where}: events must be a list of names, e.g. events = ["finished", "fault"]'
            )
        wrong = [e for e in events if e not in known]
        if wrong:
            raise ConfigError(
                f"{where}: unknown event {wrong[0]!r}; the events are {', '.join(known)}"
            )
        kinds = frozenset(events)
    return Endpoint(_checked_url(url, f"{where}: url"), fmt.lower(), kinds)


def load_notify_file(path: Path | None = None) -> list[Endpoint]:
    """The endpoints of the user's notify.toml (`path`, else notify_file()); none when it is
    absent. A file cockpit cannot read or use is a ConfigError naming it and the fix."""
    path = notify_file() if path is None else path
    try:
        text = read_small_text(path, "a notify file")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; save it as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}; fix it or remove it") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}; fix the TOML ({GUIDE})") from None
    unknown = sorted(set(data) - {"endpoint"})
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {unknown[0]!r}; list endpoints as [[endpoint]] tables"
        )
    tables = data.get("endpoint", [])
    if not isinstance(tables, list):
        raise ConfigError(
            f"{path}: endpoint must be [[endpoint]] tables, not a single value; {GUIDE}"
        )
    return [_endpoint_from_table(t, f"{path}: endpoint {i + 1}") for i, t in enumerate(tables)]
