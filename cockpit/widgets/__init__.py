"""One widget per cockpit panel."""

from cockpit.widgets.device import DevicePanel
from cockpit.widgets.loss import LossPanel
from cockpit.widgets.lr import LrPanel
from cockpit.widgets.memory import MemoryPanel
from cockpit.widgets.samples import SamplesPanel
from cockpit.widgets.status import AlertLine, StatusLine

__all__ = [
    "AlertLine",
    "DevicePanel",
    "LossPanel",
    "LrPanel",
    "MemoryPanel",
    "SamplesPanel",
    "StatusLine",
]
