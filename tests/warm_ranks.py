"""torchrun and its ranks, started warm: each is a small stand-in process (this file and
warm_process.py, stdlib only) that has a server which imported torch once fork the real one,
then mirrors it.

    [sys.executable, STAND_IN, "-m", "torch.distributed.run", ..., STAND_IN, SCRIPT, ARGS...]
    run with env=sharing_env()   (tests/distributed/launch.py, bench/distributed.py under a test)

torchrun starts its ranks as fresh interpreters, each importing torch (2-3 s of CPU on this
machine's 2 cores, three times a launch). Here the launcher and every rank it starts run
`python warm_ranks.py SCRIPT|-m MODULE ARGS...`: the stand-in hands its standard streams, its
environment (torchrun's RANK, MASTER_PORT, ...) and its working directory to the server, which
forks a child that runs SCRIPT or MODULE with them. The server is tests/warm_process.py's, of
the kind RANKS (one OpenMP thread, as torchrun sets for its ranks; torch.distributed imported).
The stand-in passes every signal it can catch on to that child and ends as the child ended (its
exit code, or killed by its signal), so torchrun sees its workers start, fail, die and restart
as it would. The child is a real process of its own, in a session of its own: it writes its pid
where the tests signal it (rank_worker's pid-R), and a SIGKILL or SIGSTOP reaches it directly.

A child dies with its stand-in: it holds the read end of a pipe only the stand-in writes to (its
lifeline), and kills its own process group when that pipe closes (a stand-in killed by torchrun
or a test's cleanup leaves no rank training on). A stand-in whose parent is gone kills its
child. Like any warm child, it gets SIGTERM when its server goes.

What a fresh interpreter would have and a fork does not: its own hash seed (the children share
the server's), its own command line in /proc (the children show the server's), and what torch
reads from the environment as it loads: OMP_NUM_THREADS must be the server's (a request with
another is refused), torchrun's LOGLEVEL is the server's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import warm_process

ENV_SERVER = "COCKPIT_TEST_WARM_RANKS"  # the server's socket, for the stand-ins torchrun starts
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
# what the ranks and the launcher import on their way to training: imported once, by the server
PRELOAD = (
    "torch", "torch.distributed", "torch.distributed.launcher.api", "torch.distributed.fsdp",
    "torch.distributed.checkpoint", "torch.nn.parallel", "torch._dynamo", "torch.optim",
    "cockpit.cli.command_line", "cockpit.cli.headless", "cockpit.cli.launch", "cockpit.cli.preflight",
    "cockpit.cli.stop_signals", "engine.rundir.metrics_log", "engine.train.build_run",
)  # fmt: skip
# one thread a process, as torchrun sets for its ranks (OpenMP reads it as torch loads)
RANKS = warm_process.ServerKind(ENV_SERVER, PRELOAD, (("OMP_NUM_THREADS", "1"),))
REPO = Path(__file__).resolve().parents[1]
STAND_IN = Path(__file__).resolve()


def server_path() -> str:
    """The ranks' server of this test process, started on first use."""
    return warm_process.server_path(RANKS)


def sharing_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) for a launch whose python processes start warm through
    STAND_IN: this test process's server named, one thread a process, this checkout's code."""
    return {
        **(os.environ if env is None else env), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
        ENV_SERVER: server_path(),
    }  # fmt: skip


# ------------------------------------------------------------------ the stand-in
def stand_in(argv: list[str]) -> None:
    """Have the server run `argv` as a child, pass signals on to it, and end as it ended."""
    path = os.environ.get(ENV_SERVER)
    if not path:
        sys.exit(f"warm_ranks.py: {ENV_SERVER} is not set; start it with warm_ranks.sharing_env()")
    parent = os.getppid()
    lifeline_read, lifeline_write = os.pipe()
    try:
        child = warm_process.Popen(
            [sys.executable, *argv], start_new_session=True, server=path, lifeline=lifeline_read
        )
    except (OSError, ValueError) as error:
        sys.exit(f"warm_ranks.py: the server did not start {argv}: {error}")
    os.close(lifeline_read)
    warm_process.pass_signals_on(child.pid, FORWARDED)
    while True:
        try:
            code = child.wait(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:  # torchrun is gone: so is its worker
                os.kill(child.pid, signal.SIGKILL)
                os._exit(1)
    os.close(lifeline_write)
    if code < 0:  # killed by a signal: so is the stand-in
        if -code != signal.SIGKILL:  # a handler of its own to undo (SIGKILL has none)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    stand_in(sys.argv[1:])
