"""The terminal's approval of an agent's proposal (`cockpit autopilot --llm` without --auto): the
proposal asked in one line, then the person's answer taken as they type it (y: apply it, n NOTE:
reject it, the note for the agent, e: edit it), read without blocking so that the loop asking it
goes on watching the run meanwhile."""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable
from typing import Any

ASK = "apply it? y: yes, n [NOTE]: no (the agent hears the note), e: edit"
EDIT = (
    "the action instead, as a rules file spells it (set KEY=VALUE, cooldown [STEPS], "
    "checkpoint, rollback [LR_FACTOR], scale_lr FACTOR); enter: reject"
)


class ApprovalPrompt:
    """One proposal at a time (a live_agent action) asked on this terminal, answered on stdin.
    `apply(proposal)`: the person said yes; `apply_edited(proposal, action)`: they typed an
    action (autopilot_rules.Action) instead; `tell_agent(line)`: a rejection and its note, for
    the agent's next round."""

    def __init__(
        self,
        apply: Callable[[Any], None],
        apply_edited: Callable[[Any, Any], None],
        tell_agent: Callable[[str], None],
    ) -> None:
        self.apply = apply
        self.apply_edited = apply_edited
        self.tell_agent = tell_agent
        self.awaiting: Any = None  # the proposal asked (or being edited)
        self.editing = False
        self.typed = ""  # what the person typed, not yet taken as answers

    def ask(self, proposal: Any) -> None:
        """Put `proposal` (already said in a line) to the person; `poll` takes the answer."""
        print(ASK, flush=True)
        self.awaiting = proposal

    def poll(self) -> None:
        """The person's answers to the proposal awaiting, as lines of them come."""
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if ready:
            data = os.read(sys.stdin.fileno(), 4096)
            # the terminal closed: nobody is left to approve, so no is the answer
            self.typed = self.typed + data.decode(errors="replace") if data else "n\n"
        while self.awaiting is not None and "\n" in self.typed:
            line, self.typed = self.typed.split("\n", 1)
            self.take(line.strip())

    def take(self, answer: str) -> None:
        """One line of the person's answer."""
        from cockpit.research.autopilot_rules import parse_action
        from engine.config import ConfigError

        proposal = self.awaiting
        if self.editing:
            self.editing = False
            if not answer:
                print("rejected", flush=True)
                self.awaiting = None
                return
            try:
                action = parse_action(answer, "the action")
            except ConfigError as e:
                print(f"{e}; e to edit again, n to reject", flush=True)
                return
            print(f"doing: {action.text}", flush=True)
            self.apply_edited(proposal, action)
            self.awaiting = None
            return
        word, _, note = answer.partition(" ")
        if word.lower() in ("y", "yes"):
            print(f"doing: {proposal.text}", flush=True)
            self.apply(proposal)
        elif word.lower() in ("n", "no"):
            note = note.strip()
            self.tell_agent(f"{proposal.text}: {note or 'rejected, no note given'}")
            heard = ": the agent hears your note next time" if note else ""
            print(f"rejected{heard}", flush=True)
        elif word.lower() in ("e", "edit"):
            self.editing = True
            print(EDIT, flush=True)
            return
        else:
            print(f"{answer!r}: answer y, n (a note after it for the agent), or e", flush=True)
            return
        self.awaiting = None
