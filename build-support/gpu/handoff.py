"""Where a weight handoff's time goes on one GPU: the trainer's publish and the server's
reload of a 358M-parameter bf16 snapshot, phase by phase, each with its alternative
timed in the same run (medians of ``--repeats``). Prints a table; writes
``handoff.json`` into the folder given (argv[1]).

    python build-support/gpu/handoff.py OUT [--small] [--repeats N]

Publish: the device-to-host copy (tensor by tensor) vs one copy into pinned
buffers; writing the safetensors (hashed while written); fsync; the whole
``SnapshotPublisher.publish`` (shards written in parallel, each piece sent to disk
as written) vs the same publish as one file, and both without the early writeback. Reload: ``load_file`` to the CPU vs
straight to the GPU, the finiteness check on each, ``load_state_dict`` from each,
and the whole ``load_snapshot`` the server runs (into a spare model); then reloads
through a real embedded server over HTTP, next to the server's own timing of them.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from gen_heavy import prepared_model  # (this folder: the same model as the gen-heavy runs)

from backends.inference.embedded.weights import all_finite, load_snapshot
from nexrl.util.files import fsync_tree
from nexrl.weights.snapshot import SnapshotPublisher, prepare_state_dict, write_safetensors


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        _sync()
        t = time.perf_counter()
        out = fn()
        _sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(out: Path, small: bool, repeats: int) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    work = Path("/tmp/nexrl-handoff")
    model_dir, _ = prepared_model(work, small)

    def build() -> Any:
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
        return m.to(device).eval()

    trainer, served, spare = build(), build(), build()
    state = trainer.state_dict()
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    r: dict[str, Any] = {"device": str(device), "bytes": nbytes, "repeats": repeats}

    # -- publish ------------------------------------------------------------------
    r["d2h_per_tensor_s"], cpu_state = timed(
        lambda: {k: v.to("cpu") for k, v in prepare_state_dict(state).items()}, repeats
    )
    pinned = {
        k: torch.empty(v.shape, dtype=v.dtype, pin_memory=device.type == "cuda")
        for k, v in state.items()
    }

    def d2h_pinned() -> None:
        for k, v in state.items():
            pinned[k].copy_(v, non_blocking=True)

    r["d2h_pinned_s"], _ = timed(d2h_pinned, repeats)
    n = iter(range(10**6))

    def write() -> None:
        d = work / f"w{next(n)}"
        d.mkdir()
        write_safetensors(cpu_state, d, digests={})

    r["write_hashed_s"], _ = timed(write, repeats)
    r["fsync_s"], _ = timed(lambda: fsync_tree(work / "w0"), 1)
    publisher = SnapshotPublisher(work / "snaps", tokenizer_dir=model_dir, keep=2)
    versions = iter(range(1, 10**6))
    r["publish_s"], pub = timed(
        lambda: publisher.publish(state, trainer.config, next(versions)), repeats
    )
    one_file = SnapshotPublisher(
        work / "one", tokenizer_dir=model_dir, keep=2, max_shard_bytes=1 << 40
    )  # the baseline: one file
    r["publish_one_file_s"], _ = timed(
        lambda: one_file.publish(state, trainer.config, next(versions)), repeats
    )
    import nexrl.util.checksums as checksums

    real = checksums.start_writeback
    checksums.start_writeback = lambda fd, offset, nbytes: None  # the fsync at the end only
    try:
        r["publish_one_file_no_writeback_s"], _ = timed(
            lambda: one_file.publish(state, trainer.config, next(versions)), repeats
        )
        r["publish_no_writeback_s"], pub = timed(
            lambda: publisher.publish(state, trainer.config, next(versions)), repeats
        )
    finally:
        checksums.start_writeback = real
    snap = pub.path
    r["shards"] = len(list(snap.glob("model*.safetensors")))
    st = snap / "model.safetensors"
    if not st.is_file():  # sharded
        st = sorted(snap.glob("model-*.safetensors"))[0]

    # -- reload -------------------------------------------------------------------
    r["load_file_cpu_s"], cpu_t = timed(lambda: load_file(str(st)), repeats)
    r["load_file_gpu_s"], gpu_t = timed(lambda: load_file(str(st), device=str(device)), repeats)
    r["all_finite_cpu_s"], _ = timed(lambda: all_finite(cpu_t.values()), repeats)
    r["all_finite_gpu_s"], _ = timed(lambda: all_finite(gpu_t.values()), repeats)
    r["load_state_dict_from_cpu_s"], _ = timed(
        lambda: spare.load_state_dict(cpu_t, strict=False), repeats
    )
    r["load_state_dict_from_gpu_s"], _ = timed(
        lambda: spare.load_state_dict(gpu_t, strict=False), repeats
    )
    # as in the server after its first reloads: the served model and the spare each came
    # out of a reload (so the config bytes are known and the spare is reused, not copied)
    kw: dict[str, Any] = {"device": device, "dtype": torch.bfloat16}
    served = load_snapshot(snap, reference=served, **kw)
    spare = load_snapshot(snap, reference=served, **kw)
    r["load_snapshot_spare_s"], _ = timed(
        lambda: load_snapshot(snap, reference=served, spare=spare, **kw), repeats
    )
    r["load_snapshot_copy_s"], _ = timed(
        lambda: load_snapshot(snap, device=device, dtype=torch.bfloat16, reference=served),
        repeats,
    )
    r["files_in_snapshot"] = sorted(p.name for p in snap.iterdir())
    r.update(_http_reloads(model_dir, publisher, device, repeats))
    (out / "handoff.json").write_text(json.dumps(r, indent=1, default=str))
    print(f"{nbytes / 1e6:.0f} MB of weights on {device}; medians of {repeats}")
    for k, v in r.items():
        if k.endswith("_s") and isinstance(v, float):
            print(f"  {k:32} {v:8.3f} s")
    shutil.rmtree(work, ignore_errors=True)


def _http_reloads(model_dir: Path, publisher: Any, device: Any, repeats: int) -> dict[str, Any]:
    """Reloads through a real embedded server on ``device`` (``/update_weights_from_disk``,
    alternating two snapshots), timed by the caller and by the server's own log line."""
    import re

    import httpx

    from backends.inference.embedded import EmbeddedServer

    snaps = sorted(publisher.root.glob("v*"), key=lambda p: int(p.name[1:]))[-2:]
    log = Path("/tmp/nexrl-handoff-server.log")
    args = ["--device", str(device), "--dtype", "bfloat16", "--log-level", "info"]
    times = []
    server = EmbeddedServer(model_dir, extra_args=args, log_path=log, startup_timeout_s=300)
    with server as srv, httpx.Client(timeout=120) as client:
        for i in range(repeats + 2):  # the first two: the spare is made, then reused
            t = time.perf_counter()
            resp = client.post(
                f"{srv.base_url}/update_weights_from_disk",
                json={"model_path": str(snaps[i % 2]), "version": 100 + i},
            )
            times.append(time.perf_counter() - t)
            resp.raise_for_status()
    own = [float(x) for x in re.findall(r"loaded and checked in ([0-9.]+) s", log.read_text())]
    return {
        "http_reload_s": statistics.median(times[2:]),
        "http_reload_all_s": times,
        "server_side_reload_s": statistics.median(own[2:]) if len(own) > 2 else None,
        "server_side_all_s": own,
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    reps = int(args[args.index("--repeats") + 1]) if "--repeats" in args else 5
    main(Path(args[0]), "--small" in args, reps)
