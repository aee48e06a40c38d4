"""`cockpit_here` leaves the test process as it found it: what a command sets process-wide
(signal handlers, umask, excepthooks, warning filters) does not leak into later tests."""

from __future__ import annotations

import os
import signal
import sys
import warnings

from command_here import SIGNALS, process_state_kept


def test_what_a_command_sets_process_wide_is_put_back():
    handlers = {sig: signal.getsignal(sig) for sig in SIGNALS}
    umask = os.umask(0o022)
    os.umask(umask)
    hook = sys.excepthook
    filters = list(warnings.filters)
    with process_state_kept():
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        os.umask(0o077 if umask != 0o077 else 0o022)
        sys.excepthook = print
        warnings.simplefilter("ignore")
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == handlers
    assert os.umask(umask) == umask
    assert sys.excepthook is hook and warnings.filters == filters

