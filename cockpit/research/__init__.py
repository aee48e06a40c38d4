"""Keep-or-discard research: proposers of changes and the loop that tries them."""

from cockpit.research.changes_file import ChangesFileProposer, read_changes
from cockpit.research.proposals import (
    FIXED_KEYS,
    Proposal,
    Proposer,
    ResearchContext,
    change_settings,
    change_text,
    check_change,
    settable_keys,
)
from cockpit.research.search import (
    MARGIN_FLOOR,
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
    "ChangesFileProposer",
    "Proposal",
    "Proposer",
    "ResearchContext",
    "Search",
    "SearchSpec",
    "Stopped",
    "change_settings",
    "change_text",
    "check_change",
    "check_search",
    "decide",
    "noise_margin",
    "read_changes",
    "settable_keys",
]
