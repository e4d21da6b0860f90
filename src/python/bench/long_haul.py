"""A long run of the default recipe at the e2e size, sampled as it goes: every process's
memory, open files and threads, the run folder's disk use and the step time (issue 48).

    PYTHONPATH=src/python python -m bench.long_haul runs/long_haul --steps 10000 --every 100
    PYTHONPATH=src/python python -m bench.long_haul runs/long_haul --plot-only

The run is ``python -m nexrl.driver.cli.train`` on recipes/max_digit/max_digit_tiny.yaml with
4 prompts x 8 samples per step and 2 worker processes (the e2e tests' size), a
checkpoint every ``--save-every`` steps. Every ``--every`` steps (read from
metrics.jsonl) one sample: per process (driver, warm parent, each Dask worker, the
trainer's worker, the inference server) RSS, open file descriptors and threads; the
bytes under pool.zarr, checkpoints, snapshots and logs; the mean step time since the
last sample. Samples go to ``<out>.samples.jsonl``, the figure to ``<out>.png``
(``--plot`` elsewhere). ``growth`` gives each series' change per 1,000 steps over
the second half of the run (the first half includes warm-up: caches, the allocator).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

__all__ = ["growth", "plot_samples", "run_long_haul", "sample"]

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"
FOLDERS = ("pool.zarr", "checkpoints", "snapshots", "logs")
STALL_S = 600  # no new step for this long: a hang


def overrides(out: Path, steps: int, save_every: int) -> list[str]:
    return [
        f"output_dir={out}",
        f"trainer.total_train_steps={steps}",
        f"trainer.save_every={save_every}",
        "trajectory_pool.batch_size=32",
        "trainer.micro_batch_size=32",
        "validate.validate_before_train=false",
        "validate.every=0",
        "cluster.n_workers=2",
        "cluster.dashboard_address=127.0.0.1:0",
    ]


def last_step(metrics: Path) -> int:
    """The step of metrics.jsonl's last complete row (0 when none), read from its tail."""
    try:
        with open(metrics, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def _bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def roles(driver: psutil.Process, out: Path) -> dict[str, psutil.Process]:
    """``{role: process}`` of the run: driver, server (its pid in driver.log), trainer
    (cluster.json), warm parent (the driver's forkserver child), worker-N (the other
    Dask workers, by pid)."""
    found = {"driver": driver}
    log = out / "logs" / "driver.log"
    text = log.read_text() if log.exists() else ""
    servers = re.findall(r"embedded server at \S+ \(pid (\d+)\)", text)  # as the soak reads it
    server = int(servers[-1]) if servers else -1
    try:
        trainer = int(json.loads((out / "cluster.json").read_text())["trainer_ranks"][0]["pid"])
    except (OSError, ValueError, KeyError, IndexError):
        trainer = -1
    workers = []
    driver_cmd = " ".join(driver.cmdline())
    for child in driver.children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "resource_tracker" in cmd:
            continue
        # the warm parent and what it forks: a fork of the driver (its command line),
        # or a multiprocessing forkserver started fresh (cluster.warm_parent spawned)
        forked = "forkserver" in cmd or cmd == driver_cmd
        if child.pid == server:
            found["server"] = child
        elif child.pid == trainer:
            found["trainer"] = child
        elif forked and child.ppid() == driver.pid:
            found["warm parent"] = child
        elif "spawn_main" in cmd or forked:
            workers.append(child)
    for i, w in enumerate(sorted(workers, key=lambda p: p.pid)):
        found[f"worker-{i}"] = w
    return found


def sample(driver: psutil.Process, out: Path, step: int, since: tuple[int, float]) -> dict:
    """One sample (module doc) at ``step``; ``since`` is the previous (step, time)."""
    procs: dict[str, dict[str, int]] = {}
    for role, p in roles(driver, out).items():
        try:
            with p.oneshot():
                procs[role] = {
                    "rss": int(p.memory_info().rss),
                    "fds": int(p.num_fds()),
                    "threads": int(p.num_threads()),
                }
        except psutil.Error:
            continue
    now = time.monotonic()
    return {
        "step": step,
        "time": now,
        "step_s": (now - since[1]) / max(1, step - since[0]),
        "procs": procs,
        "disk": {name: _bytes(out / name) for name in FOLDERS},
    }


def run_long_haul(
    out: Path,
    steps: int,
    every: int = 100,
    save_every: int = 500,
    on_sample: Callable[[dict], None] | None = None,
    env: dict[str, str] | None = None,
) -> list[dict]:
    """Run and sample (module doc); the samples. Raises on a failed run or a hang."""
    out.parent.mkdir(parents=True, exist_ok=True)
    samples_file = out.parent / f"{out.name}.samples.jsonl"
    console = out.parent / f"{out.name}.console.log"
    args = [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        RECIPE,
        *overrides(out, steps, save_every),
    ]
    samples: list[dict] = []
    with open(console, "ab") as log, open(samples_file, "a") as record:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        driver = psutil.Process(proc.pid)
        try:
            since, nxt = (0, time.monotonic()), every
            seen, changed = 0, time.monotonic()
            while proc.poll() is None:
                time.sleep(1.0)
                now = last_step(out / "metrics.jsonl")
                if now != seen:
                    if seen == 0:  # the first row: step times count from here, not start-up
                        since = (now, time.monotonic())
                    seen, changed = now, time.monotonic()
                elif time.monotonic() - changed > STALL_S:
                    raise AssertionError(f"no step for {STALL_S} s after step {now}: a hang")
                if now >= nxt:
                    s = sample(driver, out, now, since)
                    samples.append(s)
                    record.write(json.dumps(s) + "\n")
                    record.flush()
                    if on_sample:
                        on_sample(s)
                    since, nxt = (now, s["time"]), (now // every + 1) * every
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"the run exited {proc.returncode}: {console.read_text()[-3000:]}")
    return samples


def growth(samples: list[dict]) -> dict[str, float]:
    """Each series' change per 1,000 steps between the middle sample and the last (the
    second half: after warm-up), by a least-squares line over those samples."""
    if len(samples) < 4:
        return {}
    half = samples[len(samples) // 2 :]
    series: dict[str, list[tuple[int, float]]] = {}
    for s in half:
        for role, v in s["procs"].items():
            for k in ("rss", "fds", "threads"):
                series.setdefault(f"{role}/{k}", []).append((s["step"], float(v[k])))
        for name, b in s["disk"].items():
            series.setdefault(f"disk/{name}", []).append((s["step"], float(b)))
        series.setdefault("step_s", []).append((s["step"], float(s["step_s"])))
    rates = {}
    for key, pts in series.items():
        if len(pts) < 3:
            continue
        n = len(pts)
        mx = sum(x for x, _ in pts) / n
        my = sum(y for _, y in pts) / n
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        if sxx > 0:
            rates[key] = 1000.0 * sum((x - mx) * (y - my) for x, y in pts) / sxx
    return rates


def plot_samples(samples: list[dict], path: Path, title: str = "") -> Path:
    """Five panels over the step: RSS, open files and threads per process, disk per
    folder, step time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nexrl.core.util.files import atomic_path

    fig, axes = plt.subplots(1, 5, figsize=(22, 4))
    steps = [s["step"] for s in samples]
    roles_seen = sorted({r for s in samples for r in s["procs"]})
    for ax, key, label, scale in (
        (axes[0], "rss", "RSS (MiB)", 1 / 2**20),
        (axes[1], "fds", "open file descriptors", 1.0),
        (axes[2], "threads", "threads", 1.0),
    ):
        for role in roles_seen:
            pts = [
                (s["step"], s["procs"][role][key] * scale) for s in samples if role in s["procs"]
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=role)
        ax.set_title(label)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    for name in FOLDERS:
        axes[3].plot(steps, [s["disk"][name] / 2**20 for s in samples], label=name)
    axes[3].set_title("disk (MiB)")
    axes[3].legend(fontsize=7)
    axes[3].set_xlabel("step")
    axes[4].plot(steps, [s["step_s"] for s in samples])
    axes[4].set_title("seconds per step")
    axes[4].set_xlabel("step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.long_haul", description=__doc__.split("\n")[0]
    )
    p.add_argument("out", type=Path, help="the run folder (must not exist, unless --plot-only)")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--save-every", type=int, default=500)
    p.add_argument("--plot", type=Path, help="the figure (default <out>.png)")
    p.add_argument("--plot-only", action="store_true", help="draw <out>.samples.jsonl")
    args = p.parse_args(argv)
    samples_file = args.out.parent / f"{args.out.name}.samples.jsonl"
    if args.plot_only:
        samples = [json.loads(x) for x in samples_file.read_text().splitlines() if x.strip()]
    else:
        samples = run_long_haul(
            args.out, args.steps, args.every, args.save_every,
            on_sample=lambda s: print(json.dumps({"step": s["step"], "step_s": round(s["step_s"], 4)}), flush=True),
        )  # fmt: skip
    figure = plot_samples(samples, args.plot or args.out.parent / f"{args.out.name}.png")
    print(json.dumps(growth(samples), indent=1))
    print(f"figure: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
