"""``python -m backends.inference.embedded --model DIR --host 127.0.0.1 --port N``.

``--fd`` serves on an already-bound listening socket (how ``EmbeddedServer``
starts it without a port race); otherwise ``--host``/``--port`` are bound.
SIGTERM/SIGINT shut down cleanly (uvicorn finishes open requests briefly).

Security: the bearer token is read from the environment variable
``NEXRL_INFERENCE_TOKEN`` (never a flag: the command line is visible to every
user of the machine); with it, every request needs ``Authorization: Bearer
<token>``. A ``--host`` beyond loopback without a token is refused at start.
``--snapshot-root DIR``: reloads accept only directories under ``DIR``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the network for a local snapshot


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m backends.inference.embedded", description=__doc__)
    p.add_argument("--model", required=True, help="HF-format model directory")
    p.add_argument("--served-model-name", default=None, help="name clients pass as `model`")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--snapshot-root",
        default=None,
        help="reloads (/update_weights_from_disk) accept only directories under this one "
        "(default: any directory)",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    p.add_argument("--policy-version", type=int, default=0, help="version of the initial weights")
    p.add_argument("--max-batch-size", type=int, default=16, help="rows per batch")
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=5.0,
        help="gather a batch while requests arrive within this many ms of each other",
    )
    p.add_argument(
        "--batch-max-wait-ms",
        type=float,
        default=50.0,
        help="hold a batch's first request at most this many ms while gathering",
    )
    p.add_argument(
        "--no-continuous-batching",
        dest="continuous_batching",
        action="store_false",
        help="a batch runs to its end before requests that arrived meanwhile start "
        "(static batching; the baseline of tests/benchmarks/test_bench_inference.py)",
    )
    p.add_argument(
        "--decoder",
        choices=("auto", "slots", "model"),
        default="auto",
        help="slots: a preallocated KV cache and fixed-shape decode steps (CUDA graphs on a "
        "GPU) for Llama/Mistral/Qwen2/Qwen3; model: the model's forward with a growing "
        "cache; auto: slots where the model allows",
    )
    p.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_false",
        help="with decoder slots on a GPU: launch each step's kernels instead of a graph",
    )
    p.add_argument(
        "--kv-cache-gib",
        type=float,
        default=0.0,
        help="most GiB of the slots' KV cache (0: a quarter of the free GPU memory, 2 on a CPU)",
    )
    p.add_argument("--logprobs-mode", choices=("raw", "processed"), default="raw")
    p.add_argument("--seed", type=int, default=0, help="RNG seed for requests without a seed")
    p.add_argument("--torch-threads", type=int, default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument(
        "--api",
        choices=("embedded", "vllm"),
        default="embedded",
        help="'vllm': a stand-in for a vLLM server in tests (no policy version in replies; "
        "weights reload through vLLM's dev-mode /collective_rpc routes)",
    )
    p.add_argument(
        "--enable-lora",
        action="store_true",
        help="with --api vllm: load LoRA snapshots through /v1/load_lora_adapter, as vLLM "
        "started with --enable-lora does",
    )
    p.add_argument(
        "--max-lora-rank", type=int, default=16, help="with --enable-lora: the largest rank"
    )
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="exit when this process is gone (no orphan server when its supervisor is killed)",
    )
    return p.parse_args(argv)


def watch_parent(pid: int, interval_s: float = 1.0) -> threading.Thread:
    """A daemon thread that SIGTERMs this process once ``pid`` is no longer its parent
    (the supervisor died, even by SIGKILL), and hard-exits if that does not end it."""

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(interval_s)
        logging.getLogger(__name__).warning("parent %d is gone; shutting down", pid)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10.0)
        os._exit(1)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    from nexrl.core.util.auth import INFERENCE_TOKEN_ENV, bind_refusal, token_of

    token = token_of(os.environ.get(INFERENCE_TOKEN_ENV))
    refusal = bind_refusal(
        args.host,
        token,
        what="the embedded inference server",
        field=f"service.inference_service.api_key (here: the {INFERENCE_TOKEN_ENV} variable)",
    )
    if refusal:
        sys.exit(f"error: {refusal}")
    model_dir = Path(args.model)
    if not ((model_dir / "config.json").is_file() or (model_dir / "adapter_config.json").is_file()):
        # fail fast, before importing torch
        sys.exit(f"error: --model {args.model!r} is not a model directory (no config.json)")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    if args.parent_pid is not None:
        watch_parent(args.parent_pid)
    import torch
    import uvicorn
    from transformers import AutoTokenizer

    from backends.inference.embedded.app import create_app
    from backends.inference.embedded.service import BatchingConfig, InferenceService
    from backends.inference.embedded.weights import LoadedModel, load_model_dir, resolve_dtype
    from nexrl.core.util.net import SERVER_KEEP_ALIVE_S

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    random.seed(args.seed)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    model, base = load_model_dir(args.model, device=device, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    service = InferenceService(
        LoadedModel(model=model, version=args.policy_version, path=args.model),
        tokenizer,
        device=device,
        dtype=dtype,
        batching=BatchingConfig(
            args.max_batch_size,
            args.batch_window_ms / 1000.0,
            args.batch_max_wait_ms / 1000.0,
            continuous=args.continuous_batching,
            decoder=args.decoder,
            cuda_graphs=args.cuda_graphs,
            kv_cache_gib=args.kv_cache_gib,
        ),
        logprobs_mode=args.logprobs_mode,
        base_model=base,
    )
    name = args.served_model_name or args.model
    app = create_app(
        service,
        name,
        api=args.api,
        token=token,
        snapshot_root=args.snapshot_root,
        max_lora_rank=args.max_lora_rank if args.enable_lora else None,
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=SERVER_KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)
    sockets = [socket.socket(fileno=args.fd)] if args.fd is not None else None
    server.run(sockets=sockets)
