"""The run's page on the Dask dashboard (``/nexrl``), live or on a finished run folder.

* ``history``: reads the run folder (metrics.jsonl, samples.jsonl, config.yaml) into
  the page's columns, incrementally (only lines appended since the last read);
* ``samples``: the driver appends a few decoded trajectories per step to samples.jsonl;
* ``page``: the Bokeh document (reward, step time, versions, pool, trajectories);
* ``plugin``: a Dask ``SchedulerPlugin`` that adds the page to the scheduler's own
  dashboard (same host and port as ``/status``, listed in its navigation);
* ``serve``: a small Bokeh server on a finished run folder.

Bokeh is imported by ``page``, ``plugin`` and ``serve`` only (inside the process
that serves the page).
"""

from nexrl.driver.dashboard.history import RunHistory

__all__ = ["RunHistory"]
