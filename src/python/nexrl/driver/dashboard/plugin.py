"""``DashboardPlugin``: the ``/nexrl`` page on the run's own Dask dashboard.

Dask builds its dashboard's Bokeh applications once, when the scheduler starts
(``distributed.dashboard.scheduler.connect``: the ``applications`` dict wrapped in
``BokehApplication`` and added to the scheduler's ``http_application``). A
``SchedulerPlugin`` runs inside the scheduler process, so it adds one more
application the same way, at the same host and port as ``/status``, and appends
``nexrl`` to the navigation's pages. It works the same wherever the scheduler
runs (LocalCluster, an existing scheduler, Slurm) as long as the scheduler can
import nexrl and read the run folder (shared storage, as the pool already needs).

Registering again (a resumed driver on the same scheduler) points the page at the
new run folder; the history is read from disk, so nothing is lost.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

__all__ = ["PAGE", "DashboardPlugin", "install", "page_url"]

logger = logging.getLogger(__name__)
PAGE = "nexrl"
_STATE_ATTR = "_nexrl_dashboard"  # on the Scheduler: {"root": ..., "identity": ...}


class DashboardPlugin(SchedulerPlugin):
    """Adds ``/nexrl`` (reading ``root``) to the scheduler's dashboard."""

    name = "nexrl-dashboard"

    def __init__(self, root: str, identity: dict[str, Any]) -> None:
        self.root = str(root)
        self.identity = dict(identity)

    async def start(self, scheduler: Any) -> None:
        state = getattr(scheduler, _STATE_ATTR, None)
        if state is not None:  # already served: show this run
            state.update(root=self.root, identity=self.identity)
            return
        state = {"root": self.root, "identity": self.identity}
        setattr(scheduler, _STATE_ATTR, state)
        if getattr(scheduler, "http_application", None) is None:
            return
        try:
            add_page(scheduler, state)
        except ImportError as exc:  # no bokeh on the scheduler: Dask has no dashboard either
            logger.warning("nexrl dashboard page not added: %s", exc)


def add_page(scheduler: Any, state: dict[str, Any]) -> None:
    from distributed.dashboard.core import BokehApplication
    from distributed.dashboard.scheduler import template_variables
    from tornado.ioloop import IOLoop  # pants: no-infer-dep (installed with distributed)

    from nexrl.driver.dashboard.history import RunHistory
    from nexrl.driver.dashboard.page import build_document

    def doc(_server: Any, extra: dict[str, Any], doc: Any) -> None:
        from distributed.dashboard.components.scheduler import env

        history = RunHistory(state["root"], identity=state["identity"])
        build_document(doc, history)
        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)
        doc.template_variables["title"] = "nexrl"

    variables = template_variables(scheduler)  # memoized: the dict every page renders
    if PAGE not in variables["pages"]:
        variables["pages"].append(PAGE)
    prefix = _prefix(scheduler)
    app = BokehApplication(
        {f"/{PAGE}": doc}, scheduler, prefix=prefix, template_variables=variables
    )
    scheduler.http_application.add_application(app)
    app.initialize(IOLoop.current())


def _prefix(scheduler: Any) -> str:
    """The prefix Dask's own pages are served under (``dask scheduler --dashboard-prefix``)."""
    for app in scheduler.http_application.applications:
        if hasattr(app, "_prefix"):  # Dask's BokehTornado
            return str(app._prefix or "")
    return ""


def page_url(dashboard_link: str) -> str:
    """``http://host:port/status`` -> ``http://host:port/nexrl``."""
    base = (
        dashboard_link.rsplit("/", 1)[0] if dashboard_link.endswith("/status") else dashboard_link
    )
    return f"{base.rstrip('/')}/{PAGE}"


def install(client: Any, root: str, identity: dict[str, Any]) -> str:
    """Register the plugin on ``client``'s scheduler; the page's URL."""
    client.register_plugin(DashboardPlugin(root, identity), name=DashboardPlugin.name)
    return page_url(str(client.dashboard_link))
