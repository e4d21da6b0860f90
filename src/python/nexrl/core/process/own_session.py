"""The processes of a local run leave the terminal's session, so that only the driver
takes a Ctrl-C.

A terminal sends Ctrl-C (SIGINT) to every process of its foreground process group,
and ``timeout``, a service manager or ``kill -- -PGID`` send SIGTERM to a whole group.
A local run's Dask workers and its warm parent start in the driver's group; a worker
that died of the signal took the trainer actor with it, before the driver could write
its checkpoint (the run exited 1 and redid the steps since the last periodic
checkpoint, instead of checkpointing and exiting 130). So the processes the driver
starts go into sessions of their own (``setsid``):

* the warm parent (``nexrl.core.process.forkserver``) imports this module first in its
  preload, with ``OWN_SESSION_VAR`` set: it and every process forked from it start
  outside the terminal's session;
* every local Dask worker has it as its Dask ``preload`` (``dask_setup``), also a worker
  spawned fresh (``cluster.warm_parent: false``);
* the embedded server is started in a session of its own already
  (``backends.inference.embedded.handle``).

The driver alone takes the signal and stops the run at its next safe point, then shuts
these processes down. They still end with the driver if it is killed outright (Dask's
parent-alive pipe, the server's parent watch), and a signal sent to one of them by its
pid still reaches it.
"""

from __future__ import annotations

import os
from typing import Any

#: Set in the warm parent's environment only: importing this module there leaves the
#: session (an import elsewhere, e.g. by a tool reading the code, changes nothing).
OWN_SESSION_VAR = "NEXRL_OWN_SESSION"


def leave_terminal_session() -> bool:
    """Start a session (and process group) of this process's own; False if it leads
    one already."""
    try:
        os.setsid()
    except OSError:  # a session or group leader already
        return False
    return True


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in each worker process as it starts."""
    leave_terminal_session()


if os.environ.pop(OWN_SESSION_VAR, None) == "1":
    leave_terminal_session()
