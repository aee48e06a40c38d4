"""Machine telemetry: NVML and psutil backends behind one interface, the poller, throttle reasons."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.telemetry.throttle_reasons": ("THROTTLE_BY_NAME",),
    "engine.telemetry.poller": ("select_backend",),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
