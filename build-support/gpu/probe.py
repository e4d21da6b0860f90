"""What the GPU path stands on, read on the machine: torch/CUDA/NCCL/DeepSpeed versions,
bf16 arithmetic against an fp64 reference, a one-rank NCCL all-reduce, and whether
DeepSpeed's CPU Adam can be built there. Writes a JSON report (argv[1]) and prints it.
Part of build-support/gpu/check.sh."""

from __future__ import annotations

import json
import os
import sys
import time


def main(out: str) -> int:
    import torch

    report: dict[str, object] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        report.update(
            device=props.name,
            capability=f"{props.major}.{props.minor}",
            memory_gib=round(props.total_memory / 2**30, 1),
            torch_cuda=torch.version.cuda,
            bf16_supported=torch.cuda.is_bf16_supported(),
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
        # bf16 matrix product against fp64: relative error in bf16's range (1e-3..1e-2)
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(2048, 2048, device="cuda", generator=g)
        b = torch.randn(2048, 2048, device="cuda", generator=g)
        ref = (a.double() @ b.double()).float()
        got = (a.bfloat16() @ b.bfloat16()).float()
        report["bf16_matmul_rel_err"] = float((got - ref).norm() / ref.norm())
        # one-rank NCCL process group: init + all-reduce, as the trainer's
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531", RANK="0", WORLD_SIZE="1")
        t0 = time.perf_counter()
        dist.init_process_group("nccl", rank=0, world_size=1)
        x = torch.arange(4.0, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        report["nccl_all_reduce_ok"] = x.tolist() == [0.0, 1.0, 2.0, 3.0]
        report["nccl_init_s"] = round(time.perf_counter() - t0, 2)
        dist.destroy_process_group()
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from deepspeed.ops.op_builder import CPUAdamBuilder

        report["deepspeed"] = deepspeed.__version__
        report["deepspeed_accelerator"] = get_accelerator().device_name()
        report["cpu_adam_compatible"] = bool(CPUAdamBuilder().is_compatible(verbose=True))
    except Exception as exc:  # reported, not fatal: the training steps show the effect
        report["deepspeed_error"] = f"{type(exc).__name__}: {exc}"
    from importlib import metadata

    for name in ("transformers", "accelerate", "pyarrow", "datasets", "trl", "numpy"):
        try:
            report[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            report[name] = None
    text = json.dumps(report, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
