"""A proposer that asks a language model for the next change: any OpenAI-compatible chat
completions endpoint (a local Ollama, vLLM or llama.cpp server, or a hosted one).

The model gets the program (the user's Markdown, or DEFAULT_PROGRAM), the research log so far,
the best configuration, the settings it may change (with their help texts, valid ranges and
values now) and a person's notes on rejected proposals, and answers with one change as JSON,
`{"change": {"optim.lr": 0.002}, "reason": "..."}`, bare or in a Markdown code fence. A reply
that is not that, names a key it may not change, or a value the config refuses comes back as
a Proposal with `refused` saying what was wrong in one line: the search logs it and asks
again, the next prompt saying why (the search bounds how many in a row). The API key is read
from the environment and only ever handed to the client.

`Guarded` wraps any proposer with the unattended run's guards: a number of experiments and
a number of hours, after which it proposes nothing more.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
import sys
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cockpit.research.proposals import Proposal, Proposer, ResearchContext
from cockpit.research.proposals import check_change as search_check
from cockpit.research.search import Stopped
from engine.config import (
    ConfigError,
    RunConfig,
    canonical_key,
    load_preset,
    read_small_text,
)

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
# Sent when the key's variable is unset: local servers (Ollama, llama.cpp) check no key, and
# the client refuses to start without one.
NO_KEY = "no-key"
TIMEOUT_S = 120.0  # one answer; a local model on a CPU can take a minute
# the client's own retries, with a back-off, of a refused connection, a 5xx/429 answer or a
# request unanswered within the timeout
CLIENT_RETRIES = 2
SLOW_TRIES = 2  # tries (each of 1 + CLIENT_RETRIES requests) unanswered before the search stops
PROGRAM_LIMIT = 256 * 1024
LOG_ROWS_SHOWN = 100  # the newest rows: a long series would outgrow a small model's context
REPLY_SHOWN = 200  # characters of a refused reply kept in its line
REASON_LIMIT = 300  # characters of a reason kept for the log: one row, not an essay

DEFAULT_PROGRAM = """\
# Research program

You are tuning the training of a small GPT language model, one change at a time. Each experiment
trains the best configuration so far with your change applied, for the same fixed time budget,
then measures the validation bits per byte (val_bpb, lower is better). A change is kept only if
it beats the best by more than the noise between repeated runs; otherwise it is discarded.

- Propose the change you expect to lower val_bpb the most within the time budget.
- Learn from the log: don't repeat a change already tried on the same parent; move a setting
  further in a direction that helped, back off from one that hurt or crashed.
- Prefer simple changes of one setting; combine two only when they belong together.
- Respect the person's notes on rejected proposals.
"""

# Keys the agent leaves alone unless --keys names them: they change how an experiment is
# measured or where its files go (corpus, evaluation, checkpoints, ports), or the process.
AGENT_REFUSED_SECTIONS = ("data", "eval", "sample", "checkpoint", "log")
AGENT_REFUSED_KEYS = frozenset({
    "model.init_from", "train.device", "train.threads", "train.parallel", "train.seed",
    "train.log_every", "train.check_finite", "train.spike_sigma", "train.on_anomaly",
    "train.max_rollbacks",
})  # fmt: skip
AGENT_REFUSED_WHY = (
    "it sets how experiments are measured, where files go or the process, not the recipe; "
    "--keys may name it"
)

REPLY_FORMAT = (
    "Reply with one change as a JSON object and nothing else, keys as listed above:\n"
    '{"change": {"optim.lr": 0.002}, "reason": "why you expect it to lower val_bpb"}'
)

Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def agent_refused(key: str) -> bool:
    """Whether the agent leaves `key` alone unless a whitelist names it."""
    return key in AGENT_REFUSED_KEYS or key.split(".", 1)[0] in AGENT_REFUSED_SECTIONS


def load_program(path: str | os.PathLike[str]) -> str:
    """The program file's text; ConfigError (one line) when it cannot be one."""
    try:
        text = read_small_text(path, "a program file", PROGRAM_LIMIT)
    except FileNotFoundError:
        raise ConfigError(f"--program {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"--program {path}: a directory, not a Markdown file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--program {path}: not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"--program {path}: cannot read it ({e.strerror})") from None
    if not text.strip():
        raise ConfigError(f"--program {path}: empty; write what the agent should aim for")
    return text


def read_keys(
    text: str, known: Callable[[], list[str]], check: Callable[[str], str | None], example: str
) -> list[str]:
    """`--keys k1,k2` as canonical keys, each once; ConfigError (one line) for an unknown key
    (the nearest of `known()` named), one `check` refuses (its reason), or none at all."""
    keys = []
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        try:
            key = canonical_key(raw)
        except ConfigError:
            raise ConfigError(f"--keys: {unknown_key(raw, known())}") from None
        if (why := check(key)) is not None:
            raise ConfigError(f"--keys: {why}")
        keys.append(key)
    if not keys:
        raise ConfigError(f"--keys: name at least one key, e.g. --keys {example}")
    return list(dict.fromkeys(keys))


def parse_keys(text: str, settable: Sequence[str] | None = None) -> list[str]:
    """`--keys k1,k2` as canonical keys; ConfigError (one line) for an unknown key or, given
    `settable`, one the search may not change."""

    def check(key: str) -> str | None:
        if settable is None or key in settable:
            return None
        return f"{key} is not a setting the search may change"

    return read_keys(text, lambda: list(_fields()), check, "optim.lr,optim.weight_decay")


def unknown_key(key: str, known: Sequence[str]) -> str:
    """`key` is no config key: said with the closest of `known`, or all of them when few."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    if len(known) <= 12:
        return f"unknown key {key!r} (known: {', '.join(known)})"
    return f"unknown key {key!r} (every key, with its help: cockpit presets show default)"


def set_spelling(key: str, value: object) -> str:
    """`key=value` as --set reads it back to the same value."""
    return f"{key}={_toml(value)}"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string


def _fields() -> dict[str, tuple[Any, dict[str, Any]]]:
    """key -> (type, metadata) for every config key."""
    out: dict[str, tuple[Any, dict[str, Any]]] = {}
    sections = typing.get_type_hints(RunConfig)
    for section in dataclasses.fields(RunConfig):
        cls = sections[section.name]
        if not dataclasses.is_dataclass(cls):
            continue
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out[f"{section.name}.{f.name}"] = (hints[f.name], dict(f.metadata))
    return out


def _allowed(tp: Any, meta: Mapping[str, Any]) -> str:
    kind = {int: "integer", float: "number", bool: "true or false", str: "text"}.get(tp, "list")
    if "choices" in meta:
        return "one of " + ", ".join(json.dumps(c) for c in meta["choices"])
    parts = [kind]
    for name, sign in (("min", ">="), ("min_excl", ">"), ("max", "<="), ("below", "<")):
        if name in meta:
            parts.append(f"{sign} {meta[name]:g}")
    return ", ".join(parts)


def settings_text(cfg: RunConfig, keys: Sequence[str]) -> str:
    """One line per key: its value in `cfg`, what it may be, and its help text."""
    known = _fields()
    lines = []
    for key in keys:
        section, name = key.split(".", 1)
        tp, meta = known[key]
        value = getattr(getattr(cfg, section), name)
        lines.append(f"- {key} = {_toml(value)} ({_allowed(tp, meta)}): {meta.get('help', '')}")
    return "\n".join(lines)


def log_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The research log as lines the model reads, the newest LOG_ROWS_SHOWN of them."""
    if not rows:
        return "(no experiments yet)"
    columns = ("id", "change", "parent", "val_bpb", "status", "reason", "note")
    shown = rows[-LOG_ROWS_SHOWN:]
    lines = [" | ".join(columns)]
    if len(rows) > len(shown):
        lines.append(f"({len(rows) - len(shown)} earlier rows left out)")
    for row in shown:
        lines.append(" | ".join(_cell(row.get(c)) for c in columns))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return " ".join(str(value).split())


def prompt(
    program: str,
    context: ResearchContext,
    cfg: RunConfig,
    keys: Sequence[str],
    proposed_by: str,
    base: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The chat messages of a request: the program as the system message, the rest as the
    user's (with why its last proposal was refused, when it was)."""
    best = " ".join(best_settings(context.best)) or "(the preset as is)"
    parts = [
        f"Preset: {context.preset}",
        *(
            [f"Every experiment's own settings (the search's, fixed): {' '.join(base)}"]
            if base
            else []
        ),
        f"Best configuration so far (its changes to the preset): {best}",
        f"Settings you may change (key = value now (allowed): what it sets):\n"
        f"{settings_text(cfg, keys)}",
        f"Research log so far, oldest first (val_bpb: lower is better):\n{log_text(context.log_rows)}",
    ]
    if context.notes:
        parts.append("A person's notes on proposals they rejected:\n" + "\n".join(
            f"- {note}" for note in context.notes
        ))  # fmt: skip
    last = context.log_rows[-1] if context.log_rows else {}
    if last.get("status") == "refused" and last.get("proposed_by") == proposed_by:
        parts.append(f"Your last proposal was refused: {last.get('note', '')}")
    parts.append(REPLY_FORMAT)
    return [
        {"role": "system", "content": program},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)```", re.DOTALL)
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)  # reasoning models' preamble


def reply_json(text: str) -> tuple[Any, str]:
    """The JSON value a reply holds, bare or in one Markdown code fence (after a reasoning
    model's <think> preamble), and ""; or None and what is wrong with the reply (one line)."""
    body = _THINKING.sub("", text).strip()
    fenced = _FENCE.findall(body)
    if fenced:
        if len(fenced) > 1:
            return None, "more than one code block: send one change"
        body = fenced[0].strip()
    if not body:
        return None, "an empty reply"
    try:
        return json.loads(body), ""
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"


def parse_reply(text: str) -> tuple[dict[str, object], str] | str:
    """(change, reason) from a reply, or what is wrong with it (one line)."""
    reply, problem = reply_json(text)
    if problem:
        return problem
    if not isinstance(reply, dict) or not isinstance(reply.get("change"), dict):
        return 'not a JSON object with a "change" object in it'
    change = reply["change"]
    if not change:
        return '"change" is empty: name one setting to change'
    reason = reply.get("reason", "")
    if not isinstance(reason, str):
        return '"reason" is not text'
    return change, _shown(reason, REASON_LIMIT)


def check_proposal(
    context: ResearchContext,
    change: Mapping[str, object],
    allowed: Sequence[str],
    base: Sequence[str] = (),
    presets_dirs: Sequence[str] = (),
) -> tuple[dict[str, object], str | None]:
    """The change with canonical keys, and what is wrong with it on top of the search's `base`
    --sets and the best configuration (one line), or None: every key one of `allowed`, every
    value one the config takes, and something changed."""
    canonical: dict[str, object] = {}
    for key, value in change.items():
        try:
            name = canonical_key(str(key))
        except ConfigError:
            return dict(change), unknown_key(str(key), allowed)
        if name not in allowed:
            if name not in context.settable:
                why = "the search fixes it"
            elif agent_refused(name):
                why = AGENT_REFUSED_WHY
            else:
                why = f"--keys names {','.join(allowed)}"
            return dict(change), f"{name} is not a setting it may change ({why})"
        if isinstance(value, dict) or value is None:
            return dict(change), f"{name}: {json.dumps(value)} is no setting's value"
        canonical[name] = value
    base = [*base, *best_settings(context.best)]
    return canonical, search_check(context.preset, canonical, base, presets_dirs)


def best_settings(best: Mapping[str, object]) -> list[str]:
    """The best configuration's overrides as --set texts (the search gives their values as
    --set spells them)."""
    return [f"{k}={v}" if isinstance(v, str) else set_spelling(k, v) for k, v in best.items()]


def redacted_url(url: str) -> str:
    """The URL without a user name or password in it, as messages show it."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class AgentError(ConfigError):
    """The endpoint cannot serve the search (refused the key, no such model, unreachable)."""


class LLMProposer:
    """Proposals from a chat completions endpoint; see the module's docstring."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        key_env: str = DEFAULT_KEY_ENV,
        program: str = DEFAULT_PROGRAM,
        keys: Sequence[str] | None = None,
        timeout_s: float = TIMEOUT_S,
        client_retries: int = CLIENT_RETRIES,
        slow_tries: int = SLOW_TRIES,
        say: Say = _stderr,
        base: Sequence[str] = (),
        presets_dirs: Sequence[str] = (),
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise ConfigError(
                "--llm needs the openai package: pip install 'cockpit[agent]' (or openai)"
            ) from None
        if urlsplit(url).scheme not in ("http", "https"):
            raise ConfigError(
                f"--llm {redacted_url(url)}: expected an http(s) URL, e.g. http://127.0.0.1:11434/v1"
            )
        self.url = redacted_url(url)
        self.model = model
        self.proposed_by = f"llm:{model}"
        self.program = program
        self.keys = list(keys) if keys is not None else None
        self.timeout_s = timeout_s
        self.requests = 1 + client_retries  # per try: the client retries unanswered ones
        self.slow_tries = slow_tries
        self.base = list(base)  # the search's own --sets, under every experiment
        self.presets_dirs = list(presets_dirs)
        self.say = say
        self._openai = openai
        # the key lives in the client alone: never in an attribute, a message or a file
        key = environ.get(key_env) or NO_KEY
        self._secret = key if key != NO_KEY else None
        self._client = openai.OpenAI(
            base_url=url, api_key=key, timeout=timeout_s, max_retries=client_retries
        )

    def allowed(self, context: ResearchContext) -> list[str]:
        """The keys it may change: the whitelist's, else the search's less AGENT_REFUSED."""
        if self.keys is not None:
            return [k for k in self.keys if k in context.settable]
        return [k for k in context.settable if not agent_refused(k)]

    def propose(self, context: ResearchContext) -> Proposal | None:
        """The model's next change: valid, or refused with what was wrong (`refused`: the
        search logs it and asks again). Stopped, after one line saying why, when the endpoint
        cannot serve the search: the log keeps every experiment and a rerun continues."""
        allowed = self.allowed(context)
        if not allowed:
            raise ConfigError("--keys names no setting the search may change")
        settings = [*self.base, *best_settings(context.best)]
        cfg = load_preset(context.preset, settings, self.presets_dirs)
        messages = prompt(self.program, context, cfg, allowed, self.proposed_by, self.base)
        for slow in range(1, self.slow_tries + 1):
            try:
                text = self._ask(messages)
                break
            except TimeoutError:
                asked = f" to {self.requests} requests" if self.requests > 1 else ""
                self.say(
                    f"agent: {self.url} gave no answer within {self.timeout_s:g}s{asked} "
                    f"({slow} of {self.slow_tries} tries)"
                )
            except AgentError as e:
                self.say(f"agent: {e}; the search stops")
                raise Stopped from None
        else:
            self.say(
                f"agent: {self.url} answered none of {self.slow_tries} tries; the search stops"
            )
            raise Stopped
        parsed = parse_reply(text)
        if isinstance(parsed, str):
            problem = f"{parsed}: {_shown(text)}" if text.strip() else parsed
            return Proposal({}, "", self.proposed_by, refused=problem)
        change, reason = parsed
        change, problem = check_proposal(context, change, allowed, self.base, self.presets_dirs)
        return Proposal(change, reason, self.proposed_by, refused=problem or "")

    def ask(self, messages: list) -> str:
        """The reply's text to these chat messages (the key taken out of it): TimeoutError when
        none came in time, AgentError (one line) when the endpoint cannot answer."""
        return self._ask(messages)

    def _ask(self, messages: list) -> str:
        """The reply's text. TimeoutError when none came in time; AgentError (one line) when
        the endpoint cannot serve the search."""
        openai = self._openai
        try:
            answer = self._client.chat.completions.create(model=self.model, messages=messages)
        except openai.APITimeoutError:
            raise TimeoutError from None
        except openai.APIConnectionError:
            raise AgentError(f"cannot reach {self.url} (is the server running?)") from None
        except openai.APIStatusError as e:
            fix = {
                401: "the key was refused: set the variable --llm-key-env names",
                403: "the key was refused: set the variable --llm-key-env names",
                404: f"no model {self.model!r} or no chat completions there (does the URL end in /v1?)",
            }.get(e.status_code, self._scrub(" ".join(str(e.message).split()))[:REPLY_SHOWN])
            raise AgentError(f"{self.url} answered HTTP {e.status_code}: {fix}") from None
        except openai.OpenAIError as e:  # an answer that is not chat completions JSON
            raise AgentError(
                f"{self.url}: {self._scrub(' '.join(str(e).split()))[:REPLY_SHOWN]}"
            ) from None
        choices = getattr(answer, "choices", None) or []
        if not choices or choices[0].message is None:
            return ""
        return self._scrub(choices[0].message.content or "")

    def _scrub(self, text: str) -> str:
        """`text` with the key taken out: a server may echo what it was sent."""
        return text.replace(self._secret, "***") if self._secret else text


def _shown(text: str, limit: int = REPLY_SHOWN) -> str:
    """`text` on one line, cut to `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class Guarded:
    """Another proposer within an unattended run's limits: at most `experiments` proposals
    (those refused, or rejected by a person, not counted) and none after `hours` (counted from construction, the
    search's start; an experiment started before then trains to its end)."""

    def __init__(
        self,
        inner: Proposer,
        *,
        experiments: int | None = None,
        hours: float | None = None,
        say: Say = _stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if experiments is not None and experiments < 1:
            raise ConfigError(f"--experiments {experiments}: expected at least 1")
        if hours is not None and not (hours > 0 and math.isfinite(hours)):
            raise ConfigError(f"--hours {hours:g}: expected a number of hours above 0")
        self.inner = inner
        self.experiments = experiments
        self.hours = hours
        self.say = say
        self.clock = clock
        self.start = clock()
        self.proposed = 0

    def propose(self, context: ResearchContext) -> Proposal | None:
        if self.experiments is not None and self.proposed >= self.experiments:
            self.say(
                f"research: {self.proposed} of --experiments {self.experiments} done; the search stops"
            )
            return None
        if self.hours is not None and self.clock() - self.start >= self.hours * 3600:
            self.say(f"research: {self.hours:g} hours have passed (--hours); the search stops")
            return None
        proposal = self.inner.propose(context)
        if proposal is not None and not proposal.refused and not proposal.rejected:
            self.proposed += 1
        return proposal
