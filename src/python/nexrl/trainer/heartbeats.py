"""Which trainer ranks have gone silent: their Dask worker sends the scheduler no
heartbeat any more.

A worker heartbeats from its event loop every 0.5-5 s (longer with more workers),
also while its actor trains: the actor's methods run on another thread. A rank whose
worker has sent none for ``silent_s`` is hung: the process is stopped (``SIGSTOP``,
a debugger), swapped out, or wedged so that even its event loop cannot run. Dask
itself leaves such a worker in place while it holds a running task (its
``worker-ttl`` did not remove a stopped trainer's worker in 6 minutes), so the trainer
call would wait out its whole deadline with nothing on the terminal. A rank stuck in a
collective still heartbeats; ``trainer.dist_timeout_s`` ends that one.

A rank's worker that the scheduler no longer lists is *gone*: its process, job or node
died, or its node was cut off the network for longer than Dask's comm timeouts
(``distributed.comm.timeouts.tcp``, 30 s: the scheduler then removes it). Its actor is
lost with it (a worker the scheduler removed does not come back: it closes itself when
it reconnects), yet a call waiting on it may not fail on its own while the network is
cut (measured: a 90 s partition of a rank's node left the step waiting until the link
came back; without it, until ``trainer.dist_timeout_s``). ``raise_if_silent`` names it
(``TrainerLostError``) at the first probe after the scheduler removed it.

The check compares the scheduler's ``last_seen`` of each worker with the value of
the previous probe, on this process's clock only, so it holds when the scheduler
runs on another machine.
"""

from __future__ import annotations

import time
from typing import Any

from nexrl.core.util.dask_workers import SilenceClock, workers_of
from nexrl.trainer.errors import TrainerLostError, TrainerSilentError

__all__ = ["Heartbeats", "QuietNotice", "raise_if_gone", "raise_if_silent"]


class Heartbeats:
    """The heartbeats of the workers at ``addrs`` (rank order), probed at most every
    ``every_s``; ``silent_s`` 0 = never silent."""

    def __init__(self, client: Any, addrs: list[str], silent_s: float, every_s: float = 1.0):
        self.client, self.addrs = client, list(addrs)
        self.silent_s, self.every_s = float(silent_s), float(every_s)
        self._clock = SilenceClock()
        self._next_probe = 0.0
        self._quiet: dict[int, float] = {}
        self._known: set[str] = set()  # workers a probe has listed
        self._gone: list[int] = []  # ranks whose worker a probe listed, and no longer does

    def quiet(self, fresh: bool = False) -> dict[int, float]:
        """Seconds since each rank's worker last sent a heartbeat (as far as this
        process has seen: counted from the first probe), probing the scheduler at most
        every ``every_s`` (``fresh``: now); a worker the scheduler no longer has is not
        listed (it is ``gone``)."""
        now = time.monotonic()
        if now < self._next_probe and not fresh:
            return self._quiet
        self._next_probe = now + self.every_s
        try:
            workers = workers_of(self.client)  # not scheduler_info(): see workers_of
        except Exception:  # a scheduler that does not answer is found by the controller
            return self._quiet
        mine = {a: workers[a] for a in self.addrs if a in workers}
        silent = self._clock.observe(mine, now)
        quiet, gone = {}, []
        for rank, addr in enumerate(self.addrs):
            if addr not in silent:
                if addr in self._known:
                    gone.append(rank)
                continue
            self._known.add(addr)
            quiet[rank] = silent[addr]
        self._quiet, self._gone = quiet, gone
        return quiet

    def gone(self, fresh: bool = False) -> list[int]:
        """The ranks whose worker the scheduler listed once and no longer does (probing
        it at most every ``every_s``; ``fresh``: now)."""
        self.quiet(fresh)
        return list(self._gone)

    def silent(self) -> list[tuple[int, float]]:
        """``(rank, seconds without a heartbeat)`` of every rank silent for ``silent_s``."""
        if not self.silent_s:
            return []
        return [(r, s) for r, s in self.quiet().items() if s >= self.silent_s]


def raise_if_gone(what: str, heartbeats: Heartbeats | None, fresh: bool = False) -> None:
    """``TrainerLostError`` naming the ranks whose worker the scheduler has removed
    (``what``: the trainer call, or what the run waited for; ``fresh``: probe now)."""
    gone = heartbeats.gone(fresh) if heartbeats is not None else []
    if not gone or heartbeats is None:
        return
    ranks = ", ".join(f"rank {r}'s worker {heartbeats.addrs[r]}" for r in gone)
    raise TrainerLostError(
        f"trainer {what}: {ranks} left the Dask scheduler: its process, job or node died, "
        "or its node lost the network for longer than Dask's comm timeout "
        "(distributed.comm.timeouts.tcp)",
        tuple(gone),
    )


def raise_if_silent(what: str, heartbeats: Heartbeats | None) -> None:
    """``TrainerLostError`` naming the ranks whose worker is gone, else
    ``TrainerSilentError`` naming those that have sent no heartbeat for
    ``heartbeats.silent_s`` (``what``: the trainer call, or what the run waited for)."""
    raise_if_gone(what, heartbeats)
    silent = heartbeats.silent() if heartbeats is not None else []
    if not silent or heartbeats is None:
        return
    ranks = ", ".join(f"rank {r} (worker {heartbeats.addrs[r]}) for {s:.0f}s" for r, s in silent)
    raise TrainerSilentError(
        f"trainer {what}: no heartbeat from {ranks}: the process is stopped (SIGSTOP, a "
        f"debugger), swapped out or wedged "
        f"(runtime_monitor.trainer_silent_s={heartbeats.silent_s:g})",
        tuple(r for r, _ in silent),
    )


class QuietNotice:
    """The line a controller waiting on the trainer prints once a rank's worker has
    sent no heartbeat for ``every_s`` (and again every ``every_s``): a healthy but
    slow step prints nothing."""

    def __init__(self, every_s: float) -> None:
        self.every_s = float(every_s)
        self._next = self.every_s

    def line(self, step: int, heartbeats: Heartbeats | None) -> str | None:
        if heartbeats is None:
            return None
        quiet = heartbeats.quiet()
        if not quiet:
            return None
        rank, seconds = max(quiet.items(), key=lambda kv: kv[1])
        if seconds < self._next:
            if seconds < self.every_s:
                self._next = self.every_s  # it answered again: start over
            return None
        self._next = seconds + self.every_s
        then = (
            f"the run stops at runtime_monitor.trainer_silent_s={heartbeats.silent_s:g}"
            if heartbeats.silent_s
            else "the call ends at its deadline (runtime_monitor.trainer_silent_s=0)"
        )
        return (
            f"step {step}: trainer rank {rank} (worker {heartbeats.addrs[rank]}) has sent no "
            f"heartbeat for {seconds:.0f}s: stopped (SIGSTOP, a debugger) or wedged?; {then}"
        )
