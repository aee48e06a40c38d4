"""The keep-or-discard search: a baseline trained `repeats` times (their spread is the noise),
then each proposal tried on top of the best configuration so far for the same training time,
kept when its val bits per byte beats the best by more than that margin. Every experiment is a
row of the research log (RUNS/research/NAME/log.tsv) as it ends, and the best configuration so
far is RUNS/research/NAME/best.toml, a preset `cockpit train --preset` runs. A stop (a signal)
ends the search between experiments or checkpoints the one on its way; the same command again
reads the log back, resumes that run and goes on."""

from __future__ import annotations

import hashlib
import json
import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.ablation.research_log import LogRow, ResearchLog, log_dir, read_log
from cockpit.ablation.spec import AblationSpec, duration_text, parse_change, settled, shown_setting
from cockpit.research.proposals import (
    Proposal,
    Proposer,
    ResearchContext,
    change_settings,
    change_text,
    check_change,
    settable_keys,
)
from engine.config import ConfigError

MARGIN_FLOOR = 0.001  # bpb: below this a difference is not told from rounding and machine noise
BASELINE = "baseline"
BEST_NAME = "best.toml"
IDENTITY_NAME = "search.json"
MAX_REFUSED_IN_A_ROW = 5  # a proposer whose proposals keep being refused is stopped
REJECTED = "rejected"  # the status of a proposal a person rejected (its note in the row)


def noise_margin(baseline_bpb: Sequence[float], floor: float = MARGIN_FLOOR) -> float:
    """How much better than the best an experiment must be to be kept: the spread (max - min)
    of the baseline's repeated runs, at least `floor`."""
    if len(baseline_bpb) < 2:
        raise ValueError("the noise is measured from 2 or more baseline runs")
    return max(max(baseline_bpb) - min(baseline_bpb), floor)


def decide(bpb: float | None, best_bpb: float, margin: float, best_id: str) -> tuple[str, str]:
    """(kept or discarded, why): kept when `bpb` < `best_bpb` - `margin`."""
    if bpb is None:
        return "discarded", "no val bpb measured"
    said = f"val bpb {bpb:.4f} against the best {best_bpb:.4f} ({best_id}), margin {margin:.4f}"
    if bpb < best_bpb - margin:
        return "kept", said + f": better by {best_bpb - bpb:.4f}"
    if bpb < best_bpb:
        return "discarded", said + f": better by {best_bpb - bpb:.4f}, within the noise"
    return "discarded", said + ": not better"


@dataclass(frozen=True)
class SearchSpec:
    """What every experiment of a search shares: the preset, the training time, the `--set`s."""

    preset: str
    budget: float  # seconds of training time (train.time_budget)
    settings: tuple[str, ...] = ()  # canonical --set texts
    repeats: int = 2
    steps: int | None = None  # a cap on the steps (train.max_steps)
    name: str | None = None
    presets_dirs: tuple[str, ...] = field(default=(), compare=False)

    def common_settings(self) -> list[str]:
        spec = AblationSpec(
            preset=self.preset, budget=self.budget, settings=self.settings, steps=self.steps
        )
        return spec.common_settings()

    def identity(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "budget": self.budget,
            "settings": settled(self.settings),
            "steps": self.steps,
            "repeats": self.repeats,
        }

    def series_name(self) -> str:
        if self.name:
            return self.name
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[
            :8
        ]
        return f"research-{Path(self.preset).stem}-{digest}"


def check_search(spec: SearchSpec) -> None:
    """ConfigError (one line) for a search that cannot start."""
    if spec.repeats < 2:
        raise ConfigError(
            f"--repeats {spec.repeats}: at least 2 (the spread of the baseline's runs is the noise)"
        )
    if spec.name is not None and (
        not spec.name
        or "/" in spec.name
        or spec.name.startswith(".")
        or not spec.name.isprintable()
    ):
        raise ConfigError(f"--name {spec.name!r}: a plain directory name, e.g. --name lr-search")
    if spec.steps is not None and spec.steps < 1:
        raise ConfigError(f"--steps {spec.steps}: at least 1")
    for text in spec.settings:
        key = text.partition("=")[0]
        if key in ("train.time_budget", "train.max_steps", "train.stop_at_val"):
            raise ConfigError(f"--set {key}: the search sets it (--budget, --steps); drop it")
    why = check_change(
        spec.preset, {"train.seed": _seed(spec) + 1}, spec.common_settings(), spec.presets_dirs
    )
    if why is not None:
        raise ConfigError(why)


def _seed(spec: SearchSpec) -> int:
    from engine.config import load_preset

    try:
        return load_preset(spec.preset, spec.common_settings(), list(spec.presets_dirs)).train.seed
    except ConfigError as e:
        raise ConfigError(f"--preset {spec.preset}: {e}") from None


@dataclass
class State:
    """Where the search stands, read back from its log."""

    rows: list[LogRow]
    baseline_bpb: list[float]
    best: dict[str, str]  # key -> --set text of the kept changes
    best_bpb: float | None
    best_id: str

    @property
    def best_settings(self) -> list[str]:
        return list(self.best.values())


def read_state(rows: list[LogRow]) -> State:
    state = State(rows=rows, baseline_bpb=[], best={}, best_bpb=None, best_id=BASELINE)
    for row in rows:
        if row.id.startswith(BASELINE + "-"):
            if row.status == "kept" and row.val_bpb is not None:
                state.baseline_bpb.append(row.val_bpb)
        elif row.status == "kept" and row.val_bpb is not None:
            for text in parse_change(row.change, f"research log row {row.id}").settings:
                state.best[text.partition("=")[0]] = text
            state.best_bpb, state.best_id = row.val_bpb, row.id
    if state.best_bpb is None and len(state.baseline_bpb) >= 2:
        state.best_bpb = statistics.fmean(state.baseline_bpb)
    return state


def experiment_id(number: int, change: dict[str, object]) -> str:
    import re

    slug = "+".join(re.sub(r"[^A-Za-z0-9._=-]+", "_", w) for w in change_text(change).split())
    return f"{number:03d}-{slug.strip('_.')[:80] or 'change'}"


def rejection_notes(rows: Sequence[LogRow]) -> list[str]:
    """A person's notes on the proposals they rejected, for the proposer's next context."""
    return [f"{r.change}: {r.note}" for r in rows if r.status == REJECTED]


class Stopped(Exception):
    """The search was stopped (a signal): what is done is in the log."""


@dataclass
class Search:
    """One search: its spec, where it writes, and how it trains a run (`train_run(run_dir,
    overrides, resume) -> (state, refusal)`; the CLI's trains it headless)."""

    spec: SearchSpec
    runs_root: Path
    proposer: Proposer
    train_run: Callable[[Path, list[str], bool], str]
    stop_requested: Callable[[], bool]
    say: Callable[[str], None] = print
    notes: list[str] = field(default_factory=list)
    # the experiment train_run is called for: (its id, its change as the log shows it; "" for
    # the baseline), for a title
    on_way: tuple[str, str] | None = field(default=None, init=False)

    @property
    def name(self) -> str:
        return self.spec.series_name()

    @property
    def log(self) -> ResearchLog:
        return ResearchLog(log_dir(self.runs_root, self.name))

    @property
    def runs_dir(self) -> Path:
        return self.runs_root / self.name

    @property
    def best_path(self) -> Path:
        return self.log.directory / BEST_NAME

    def open(self) -> State:
        """The search's state from its log (none yet: a new search); ConfigError when the
        name holds a search of other settings."""
        from engine.files import atomic_write_text
        from engine.rundir import make_private_place

        directory = self.log.directory
        record = directory / IDENTITY_NAME
        identity = self.spec.identity()
        if record.is_file():
            theirs = json.loads(record.read_text())
            if theirs != identity:
                raise ConfigError(
                    f"{directory} holds a search of other settings ({_describe(theirs)}); this one is "
                    f"{_describe(identity)}: pass another --name, or the same settings"
                )
        else:
            make_private_place(directory, "research log directory", "pass --runs DIR of your own")
            atomic_write_text(record, json.dumps(identity, indent=2) + "\n")
        rows = read_log(self.log.path)[0] if self.log.path.exists() else []
        return read_state(rows)

    def run(self) -> State:
        """Run the search to its end (the proposer has nothing more) or a stop (`Stopped`)."""
        state = self.open()
        for i in range(1, self.spec.repeats + 1):
            rid = f"{BASELINE}-{i}"
            if any(r.id == rid for r in state.rows):
                continue
            seed = [] if i == 1 else [f"train.seed={_seed(self.spec) + i - 1}"]
            note = f"the baseline, preset {self.spec.preset}" + (f" ({seed[0]})" if seed else "")
            row = self._experiment(rid, seed, "", f"preset {self.spec.preset}", None, None, note)
            state = read_state([*state.rows, row])
        if len(state.baseline_bpb) < 2:
            raise ConfigError(
                f"the baseline measured {len(state.baseline_bpb)} of its {self.spec.repeats} runs "
                f"(the others failed: `cockpit research log {self.name}` says how); fix that and run again"
            )
        margin = noise_margin(state.baseline_bpb)
        self.write_best(state, margin)
        refused = 0
        while True:
            if self.stop_requested():
                raise Stopped
            context = ResearchContext(
                preset=self.spec.preset,
                best={k: v.partition("=")[2] for k, v in state.best.items()},
                log_rows=[r.to_json() for r in state.rows],
                settable=settable_keys(self.spec.preset, self.spec.presets_dirs),
                notes=[*self.notes, *rejection_notes(state.rows)],
            )
            proposal = self.proposer.propose(context)
            if proposal is None or self.stop_requested():
                if proposal is None:
                    return state
                raise Stopped
            number = sum(not r.id.startswith(BASELINE + "-") for r in state.rows) + 1
            if proposal.rejected:  # a person's decision: logged, and the proposer asked again
                row = self._rejected(number, proposal, state.best_id)
                state = read_state([*state.rows, row])
                continue
            base = [*self.spec.common_settings(), *state.best_settings]
            why = proposal.refused or check_change(
                self.spec.preset, proposal.change, base, self.spec.presets_dirs
            )
            if why is not None:
                refused += 1
                row = self._refused(number, proposal, why, state.best_id)
                state = read_state([*state.rows, row])
                if refused >= MAX_REFUSED_IN_A_ROW:
                    raise ConfigError(
                        f"the last {refused} proposals were refused (the last: {why}); search stopped"
                    )
                continue
            refused = 0
            assert state.best_bpb is not None
            settings = change_settings(proposal.change)
            row = self._experiment(
                experiment_id(number, proposal.change),
                [*state.best_settings, *settings],
                change_text(proposal.change),
                state.best_id,
                proposal,
                (state.best_bpb, margin),
            )
            state = read_state([*state.rows, row])
            if row.status == "kept":
                self.write_best(state, margin)

    def _rejected(self, number: int, proposal: Proposal, parent: str) -> LogRow:
        row = LogRow(
            id=f"{number:03d}-{REJECTED}", change=change_text(proposal.change), parent=parent,
            val_bpb=None, tokens=None, train_time_s=None, peak_memory_bytes=None, status=REJECTED,
            reason=proposal.reason, proposed_by=proposal.proposed_by, note=proposal.rejected,
        )  # fmt: skip
        self.log.append([row])
        self.say(f"{row.id}: {row.change}: rejected: {proposal.rejected}")
        return row

    def _refused(self, number: int, proposal: Proposal, why: str, parent: str) -> LogRow:
        try:
            text = change_text(proposal.change)
        except ConfigError:
            text = " ".join(f"{k}={v!r}" for k, v in dict(proposal.change).items())
        row = LogRow(
            id=f"{number:03d}-refused", change=text, parent=parent, val_bpb=None, tokens=None,
            train_time_s=None, peak_memory_bytes=None, status="refused", reason=proposal.reason,
            proposed_by=proposal.proposed_by, note=why,
        )  # fmt: skip
        self.log.append([row])
        self.say(f"{row.id}: {text}: refused: {why}")
        return row

    def _experiment(
        self,
        rid: str,
        settings: list[str],
        change: str,
        parent: str,
        proposal: Proposal | None,
        judged: tuple[float, float] | None,
        baseline_note: str = "",
    ) -> LogRow:
        """Train experiment `rid` (or resume it, or read the result it has) and log its row:
        a baseline run (`proposal` None) or a proposal judged against (best bpb, margin)."""
        from cockpit.ablation.results import read_result
        from cockpit.ablation.series_record import has_checkpoint, run_status
        from engine.events import RunState

        run_dir = self.runs_dir / rid
        self.on_way = (rid, change)
        status = run_status(run_dir)
        if status == "live":
            raise ConfigError(
                f"{run_dir} is training in another process; run this again once it has ended"
            )
        if status in (RunState.FINISHED, RunState.FAILED):
            state = status  # ended before its row was written: its result is there
        else:
            resume = status == RunState.STOPPED and has_checkpoint(run_dir)
            if not resume and run_dir.exists():  # cut short with nothing to resume: again, fresh
                n = 2
                while (self.runs_dir / f"{rid}-retry{n}").exists():
                    n += 1
                run_dir = self.runs_dir / f"{rid}-retry{n}"
            shown = change or "the baseline"
            self.say(
                f"{run_dir.name}: {'resuming' if resume else 'starting'} {shown}, {duration_text(self.spec.budget)} of training"
            )
            try:
                state = self.train_run(run_dir, [*self.spec.common_settings(), *settings], resume)
            except (
                ConfigError
            ) as e:  # refused before it started (preflight): a baseline's stops all
                if proposal is None:
                    raise
                row = LogRow(
                    id=rid, change=change, parent=parent, val_bpb=None, tokens=None,
                    train_time_s=None, peak_memory_bytes=None, status="refused",
                    reason=proposal.reason, proposed_by=proposal.proposed_by, note=str(e),
                )  # fmt: skip
                self.log.append([row])
                self.say(f"{rid}: refused: {e}")
                return row
        if state == RunState.STOPPED:
            raise Stopped
        result = read_result(rid, run_dir, state, None)
        if state == RunState.FAILED:
            status = "refused" if result.steps == 0 else "crashed"
            note = result.end_reason.splitlines()[0] if result.end_reason else "failed"
        elif proposal is None:
            status, note = (
                ("kept", baseline_note)
                if result.final_val_bpb is not None
                else ("crashed", "no val bpb measured")
            )
        else:
            status, note = decide(result.final_val_bpb, judged[0], judged[1], parent)
        row = LogRow(
            id=rid, change=change, parent=parent, val_bpb=result.final_val_bpb, tokens=result.tokens,
            train_time_s=result.train_time_s, peak_memory_bytes=result.peak_memory, status=status,
            reason=proposal.reason if proposal else "", proposed_by=proposal.proposed_by if proposal else "search",
            note=note, run_dir=str(run_dir),
        )  # fmt: skip
        self.log.append([row])
        self.say(f"{rid}: {status}: {note}")
        return row

    def write_best(self, state: State, margin: float) -> None:
        """best.toml: the preset with the search's --set and the kept changes, the whole config
        written out (it runs wherever it is copied)."""
        from engine.config import config_to_toml, load_preset
        from engine.files import atomic_write_text

        settings = [*self.spec.settings, *state.best_settings]
        cfg = load_preset(self.spec.preset, settings, list(self.spec.presets_dirs))
        kept = [r for r in state.rows if r.status == "kept" and not r.id.startswith(BASELINE + "-")]
        header = "\n".join(
            [
                f"The best configuration of research search {self.name}: preset {self.spec.preset}",
                *(f"--set {shown_setting(t)}" for t in self.spec.settings),
                *(f"kept {r.id}: {r.change} (val bpb {r.val_bpb:.4f})" for r in kept),
                f"baseline val bpb {statistics.fmean(state.baseline_bpb):.4f} (mean of "
                f"{len(state.baseline_bpb)}), margin {margin:.4f}, best {state.best_bpb:.4f}",
                f"each was trained for {duration_text(self.spec.budget)} (train.time_budget); run it: "
                f"cockpit train --preset {shlex.quote(str(self.best_path))}",
            ]
        )
        atomic_write_text(self.best_path, config_to_toml(cfg, comments=False, header=header))


def _describe(identity: dict[str, Any]) -> str:
    what = [
        f"preset {identity.get('preset')}",
        f"budget {duration_text(float(identity.get('budget') or 0))}",
    ]
    what.append(f"repeats {identity.get('repeats')}")
    if identity.get("steps"):
        what.append(f"{identity['steps']} steps")
    if identity.get("settings"):
        what.append("--set " + " ".join(identity["settings"]))
    return ", ".join(what)
