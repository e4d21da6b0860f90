"""TLS for the Dask comms of a run (``cluster.tls``): distributed's ``Security``.

* ``temporary: true``: ``Security.temporary()``, a self-signed certificate and key
  generated for this run, in memory (a ``LocalCluster``'s worker processes get
  them from the nanny); Slurm jobs read them from files :func:`write_pem_files`
  writes next to the job logs.
* ``ca_file`` / ``cert`` / ``key``: one certificate (signed by the CA) that the
  scheduler, the workers and the driver's client all present; every comm
  requires encryption and a peer certificate the CA signed.

``recipe_problems`` is the recipe check (run before any cluster starts):
missing, unreadable or mismatched files are one line naming the field.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexrl.core.config.paths import resolve_path

__all__ = ["PROTOCOL", "enabled", "recipe_problems", "security", "write_pem_files"]

PROTOCOL = "tls://"
FILES = ("ca_file", "cert", "key")


def enabled(tls: Any) -> bool:
    """Whether ``cluster.tls`` turns TLS on (temporary, or any of the files set)."""
    return bool(tls.temporary) or any(getattr(tls, f) for f in FILES)


def _resolved(value: str, roots: Sequence[Path]) -> Path:
    found = resolve_path(str(value), list(roots) or [Path.cwd()])
    return found if found is not None else Path(str(value)).expanduser()


def recipe_problems(cluster: Any, roots: Sequence[Path]) -> list[str]:
    """Problems of ``cluster.tls`` for ``cluster.type``, one line each (empty when fine).

    Existence of the files is the structure check's (``path`` fields); this adds
    what only makes sense together: the three files or none, readable, the
    certificate and key a PEM pair, a ``tls://`` address, a type that is wired."""
    tls = cluster.tls
    if not enabled(tls):
        return []
    kind = str(cluster.type)
    given = [f for f in FILES if getattr(tls, f)]
    if kind == "kubernetes":
        return [
            "cluster.tls: not wired for cluster.type 'kubernetes' (the operator starts the "
            "scheduler pod; configure TLS there); unset cluster.tls.* or use local/slurm/address"
        ]
    if tls.temporary:
        if given:
            return [
                f"cluster.tls.temporary: set either temporary: true or the files "
                f"(cluster.tls.{', cluster.tls.'.join(given)}), not both"
            ]
        if kind == "address":
            return [
                "cluster.tls.temporary: a scheduler nexrl did not start cannot trust a "
                "certificate made for this run; set cluster.tls.ca_file/cert/key to that "
                "scheduler's CA and a certificate it signed"
            ]
        return []
    missing = [f for f in FILES if not getattr(tls, f)]
    if missing:
        return [
            f"cluster.tls.{missing[0]}: required when cluster.tls.{given[0]} is set (TLS "
            "from files needs ca_file, cert and key; or set cluster.tls.temporary: true)"
        ]
    out = []
    paths = {f: _resolved(getattr(tls, f), roots) for f in FILES}
    for f, p in paths.items():
        if p.exists() and (not p.is_file() or not os.access(p, os.R_OK)):
            out.append(f"cluster.tls.{f}: '{p}' is not a readable file; fix its path or mode")
    if out or not all(p.exists() for p in paths.values()):
        return out  # a missing file is already reported by the structure check
    try:
        ctx = ssl.create_default_context(cafile=str(paths["ca_file"]))
    except (ssl.SSLError, OSError) as exc:
        out.append(f"cluster.tls.ca_file: '{paths['ca_file']}' is not a PEM CA certificate ({exc})")
        ctx = ssl.create_default_context()
    try:
        ctx.load_cert_chain(str(paths["cert"]), str(paths["key"]))
    except (ssl.SSLError, OSError) as exc:
        out.append(
            f"cluster.tls.cert/key: '{paths['cert']}' and '{paths['key']}' are not a PEM "
            f"certificate and its private key ({exc})"
        )
    if kind == "address" and cluster.address and not str(cluster.address).startswith(PROTOCOL):
        out.append(
            f"cluster.address: '{cluster.address}' with cluster.tls set must be a "
            f"{PROTOCOL} address (e.g. tls://scheduler:8786)"
        )
    return out


def security(tls: Any, roots: Sequence[Path] = ()) -> Any | None:
    """The ``distributed.Security`` of ``cluster.tls`` (None when TLS is off)."""
    if not enabled(tls):
        return None
    from distributed import Security

    if tls.temporary:
        return Security.temporary()
    ca, cert, key = (str(_resolved(getattr(tls, f), roots)) for f in FILES)
    return Security(
        require_encryption=True,
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
    )


def write_pem_files(sec: Any, directory: str | Path) -> Any:
    """A copy of ``sec`` whose in-memory certificates (``Security.temporary()``) are
    files in ``directory`` (mode 0700, files 0600): what a Slurm job's
    ``dask worker --tls-*`` arguments can name. Files already are left as they are."""
    import copy

    fields = [f for f in sec.__slots__ if f.endswith(("_cert", "_key", "_ca_file"))]
    if not any("\n" in str(getattr(sec, f) or "") for f in fields):
        return sec
    out = copy.copy(sec)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    written: dict[str, Path] = {}
    for f in fields:
        value = getattr(sec, f)
        if not value or "\n" not in str(value):
            continue
        kind = "key" if f.endswith("_key") else "cert"
        path = written.get(value) or folder / f"{kind}-{len(written)}.pem"
        if value not in written:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(value)
            written[value] = path
        setattr(out, f, str(path))
    return out
