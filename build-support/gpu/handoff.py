"""Where a weight handoff's time goes on one GPU: the trainer's publish and the server's
reload of a 358M-parameter bf16 snapshot, phase by phase, each with its alternative
timed in the same run (medians of ``--repeats``). Prints a table; writes
``handoff.json`` into the folder given (argv[1]).

    python build-support/gpu/handoff.py OUT [--small] [--repeats N] [--memory-only]

Publish: the device-to-host copy (tensor by tensor) vs one copy into pinned
buffers; writing the safetensors (hashed while written); fsync; the whole
``SnapshotPublisher.publish`` (shards written in parallel, each piece sent to disk
as written) vs the same publish as one file, and both without the early writeback. Reload: ``load_file`` to the CPU vs
straight to the GPU, the finiteness check on each, ``load_state_dict`` from each,
and the whole ``load_snapshot`` the server runs (into a spare model); then reloads
through a real embedded server over HTTP, next to the server's own timing of them.

Memory (``weight.handoff: memory``, where CUDA exists; ``--memory-only`` runs this
phase alone): one real embedded server on the GPU takes the same weights both
ways, side by side: the file way (the trainer's ``publish`` + the server's
``/update_weights_from_disk``) and the in-memory way (the trainer's copy into a
``cuda_ipc`` channel + the server's ``/update_weights_from_channel``, which copies
from the buffer into its spare model). A failure there prints one line and the
script goes on. ``NEXRL_HANDOFF_SHM=1`` runs the phase on the CPU (``shm``).
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
from nexrl.core.util.files import fsync_tree
from nexrl.core.weights.snapshot import SnapshotPublisher, prepare_state_dict, write_safetensors


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
    import nexrl.core.util.checksums as checksums

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
    r.update(_memory_phase(model_dir, trainer, device, repeats, work))
    _report(out, r, nbytes, device, repeats)
    shutil.rmtree(work, ignore_errors=True)


def _report(out: Path, r: dict[str, Any], nbytes: int, device: Any, repeats: int) -> None:
    (out / "handoff.json").write_text(json.dumps(r, indent=1, default=str))
    print(f"{nbytes / 1e6:.0f} MB of weights on {device}; medians of {repeats}")
    for k, v in r.items():
        if k.endswith("_s") and isinstance(v, float):
            print(f"  {k:32} {v:8.3f} s")


def memory_only(out: Path, small: bool, repeats: int) -> None:
    """The memory phase alone (``--memory-only``): the model, a trainer copy, the phase."""
    from transformers import AutoModelForCausalLM

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    work = Path("/tmp/nexrl-handoff")
    model_dir, _ = prepared_model(work, small)
    trainer = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device)
    nbytes = sum(t.numel() * t.element_size() for t in trainer.state_dict().values())
    r: dict[str, Any] = {"device": str(device), "bytes": nbytes, "repeats": repeats}
    r.update(_memory_phase(model_dir, trainer, device, repeats, work))
    _report(out, r, nbytes, device, repeats)
    shutil.rmtree(work, ignore_errors=True)


def _memory_phase(
    model_dir: Path, trainer: Any, device: Any, repeats: int, work: Path
) -> dict[str, Any]:
    """Files vs memory through one real embedded server (module doc); {} where CUDA is
    missing (unless NEXRL_HANDOFF_SHM=1), one line on a failure."""
    import os

    if device.type != "cuda" and os.environ.get("NEXRL_HANDOFF_SHM") != "1":
        print("memory handoff phase: skipped (no CUDA)")
        return {}
    try:
        return _memory_vs_files(model_dir, trainer, device, repeats, work)
    except Exception as exc:  # one line; the rest of the results stand
        print(f"memory handoff phase failed: {type(exc).__name__}: {exc}"[:400])
        return {"memory_phase_error": f"{type(exc).__name__}: {exc}"}


def _memory_vs_files(
    model_dir: Path, trainer: Any, device: Any, repeats: int, work: Path
) -> dict[str, Any]:
    import re

    import httpx

    from backends.inference.embedded import EmbeddedServer
    from nexrl.core.weights.handoff import WeightChannel, transport_for

    tied = bool(getattr(trainer.config, "tie_word_embeddings", False))
    tensors = prepare_state_dict(trainer.state_dict(), tie_word_embeddings=tied)
    publisher = SnapshotPublisher(work / "mem-snaps", tokenizer_dir=model_dir, keep=2)
    channel = WeightChannel(transport_for(device), device)
    log = Path("/tmp/nexrl-handoff-memory-server.log")
    args = ["--device", str(device), "--dtype", "bfloat16", "--log-level", "info"]
    pub, disk, copy, mem = [], [], [], []
    server = EmbeddedServer(model_dir, extra_args=args, log_path=log, startup_timeout_s=300)
    try:
        with server as srv, httpx.Client(timeout=120) as client:

            def post(route: str, body: dict[str, Any]) -> None:
                resp = client.post(f"{srv.base_url}{route}", json=body)
                if resp.status_code != 200:
                    raise RuntimeError(f"{route} answered {resp.status_code}: {resp.text[:300]}")

            version = 1000
            for _ in range(repeats + 2):  # the first two: the spare is made, then reused
                version += 1
                t0 = time.perf_counter()
                snap = publisher.publish(tensors, trainer.config, version)
                t1 = time.perf_counter()
                post(
                    "/update_weights_from_disk", {"model_path": str(snap.path), "version": version}
                )
                t2 = time.perf_counter()
                pub.append(t1 - t0)
                disk.append(t2 - t1)
            for i in range(repeats + 2):
                version += 1
                _sync()
                t0 = time.perf_counter()
                desc = channel.write(tensors, version)  # (waits for its copy)
                t1 = time.perf_counter()
                post(
                    "/update_weights_from_channel",
                    {"channel": desc if i == 0 else {"id": desc["id"]}, "version": version},
                )
                t2 = time.perf_counter()
                copy.append(t1 - t0)
                mem.append(t2 - t1)
    finally:
        channel.close()
    text = log.read_text()
    own_disk = [float(x) for x in re.findall(r"loaded and checked in ([0-9.]+) s", text)]
    own_mem = [float(x) for x in re.findall(r"copied and checked in ([0-9.]+) s", text)]
    med = statistics.median
    return {
        "transport": channel.transport,
        "files_publish_s": med(pub[2:]),
        "files_http_reload_s": med(disk[2:]),
        "files_total_s": med([a + b for a, b in zip(pub[2:], disk[2:], strict=True)]),
        "files_server_side_s": med(own_disk[2:]) if len(own_disk) > 2 else None,
        "memory_trainer_copy_s": med(copy[2:]),
        "memory_http_copy_s": med(mem[2:]),
        "memory_total_s": med([a + b for a, b in zip(copy[2:], mem[2:], strict=True)]),
        "memory_server_side_s": med(own_mem[2:]) if len(own_mem) > 2 else None,
        "memory_all_s": {"trainer_copy": copy, "http_copy": mem, "server_side": own_mem},
    }


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
    if "--memory-only" in args:
        memory_only(Path(args[0]), "--small" in args, reps)
    else:
        main(Path(args[0]), "--small" in args, reps)
