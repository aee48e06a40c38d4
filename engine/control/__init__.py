"""A run's control socket: the wire protocol, the server, the client handle, live-run discovery.

What is exported here is torch-free: `cockpit ps`, `runs` and `attach` import it without torch.
"""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.control.client": ("DETACHED", "RemoteEngine", "viewer_name"),
    "engine.control.connection": ("EngineUnreachable",),
    "engine.control.live_runs": ("LiveRun", "find_live_runs", "probe"),
    "engine.control.carry_on": ("carry_on", "resume_command"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
