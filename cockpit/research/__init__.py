"""Keep-or-discard research: proposers of changes and the loop that tries them."""

from cockpit.research.changes_file import ChangesFileProposer, read_changes
from cockpit.research.proposals import (
    FIXED_KEYS,
    Approving,
    ChangeLine,
    Decision,
    Proposal,
    Proposer,
    ResearchContext,
    change_lines,
    change_settings,
    change_text,
    check_change,
    parse_edit,
    settable_keys,
)
from cockpit.research.search import (
    MARGIN_FLOOR,
    REJECTED,
    Search,
    SearchSpec,
    Stopped,
    check_search,
    decide,
    noise_margin,
)

__all__ = [
    "FIXED_KEYS",
    "MARGIN_FLOOR",
    "REJECTED",
    "Approving",
    "ChangeLine",
    "Decision",
    "ChangesFileProposer",
    "Proposal",
    "Proposer",
    "ResearchContext",
    "Search",
    "SearchSpec",
    "Stopped",
    "change_lines",
    "change_settings",
    "change_text",
    "check_change",
    "check_search",
    "decide",
    "noise_margin",
    "parse_edit",
    "read_changes",
    "settable_keys",
]
