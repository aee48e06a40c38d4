"""Keep-or-discard research: proposers of changes and the loop that tries them."""

from cockpit.research.proposals import Proposal, Proposer, ResearchContext

__all__ = ["Proposal", "Proposer", "ResearchContext"]
