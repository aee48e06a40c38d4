"""What proposes the next experiment of a research series: the Proposer interface the
keep-or-discard loop drives, and the Proposal it gets back. A changes file and an LLM are two
proposers; the loop does not know which it has."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Proposal:
    """One change to try on top of the best configuration so far."""

    change: dict[str, object]  # keys as --set spells them, e.g. {"optim.lr": 0.002}
    reason: str
    proposed_by: str  # e.g. "changes file", "llm:MODEL"


@dataclass(frozen=True)
class ResearchContext:
    """What a proposer may look at to choose the next change."""

    preset: str
    best: dict[str, object]  # the overrides in force in the best configuration so far
    log_rows: list[dict] = field(default_factory=list)  # the research log so far, oldest first
    settable: list[str] = field(default_factory=list)  # the keys a proposer may change
    notes: list[str] = field(default_factory=list)  # a person's notes on rejected proposals


class Proposer(Protocol):
    def propose(self, context: ResearchContext) -> Proposal | None:
        """The next change to try, or None when there is nothing more to try."""
        ...
