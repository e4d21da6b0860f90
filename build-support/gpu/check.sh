#!/usr/bin/env bash
# The GPU path check: real training runs through `nexrl train` on one CUDA GPU
# (bf16, fused AdamW, NCCL, ZeRO-1/3, CPU offload, gradient checkpointing, the
# embedded server on the GPU, snapshot reloads), each next to its baseline in the
# same call. docs/trainer.md ("On a GPU") has what it measured.
#
#   build-support/gpu/check.sh            # on a machine with a GPU and the lock's packages
#   OUT=/tmp/gpu build-support/gpu/check.sh
#   GPU_CHECK_SMALL=1 ...                  # the same steps on small models (a CPU dry run)
#   GPU_CHECK_ONLY="probe engine gen_heavy" ...   # only the steps named
#
# On a machine whose Python lacks some of the lock's packages, put their wheels in .whl/
# (see build-support/gpu/README.md); they are installed into /tmp/site first.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/dist/gpu-check}
mkdir -p "$OUT/logs" "$OUT/metrics"
PY=${PYTHON:-python3}
WHEELS=${WHEELS-.whl}  # WHEELS= (empty): use the interpreter as it is
if [ -n "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src/python:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 NEXRL_CACHE_DIR=${NEXRL_CACHE_DIR:-/tmp/nexrl-gpu-cache}
RUNS=${RUNS:-/tmp/nexrl-gpu-runs}
rm -rf "$RUNS"; mkdir -p "$RUNS"
SUMMARY=$OUT/summary.txt
BUDGET_S=${GPU_CHECK_BUDGET_S:-540}  # the steps stop here (a device call's limit is 600 s)
: > "$SUMMARY"

# step NAME LIMIT_S CMD...: one check; its log in logs/NAME.log, GPU memory sampled
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS smi="" left=$((BUDGET_S - SECONDS))
  if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ " $GPU_CHECK_ONLY " != *" $name "* ]]; then
    return 0  # GPU_CHECK_ONLY="probe engine ...": only the steps named
  fi
  if [ "$left" -lt 30 ]; then
    echo "$name rc=skipped wall_s=0 gpu_mem_peak_mib=na" | tee -a "$SUMMARY"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 \
      > "$OUT/logs/$name.gpu_mem" 2>/dev/null &
    smi=$!
  fi
  timeout -k 10 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  # what a step stopped at its limit may leave holding GPU memory: its server, its workers
  pkill -9 -f "backends.inference.embedded" 2>/dev/null
  pkill -9 -f "multiprocessing.spawn" 2>/dev/null
  local peak=""
  [ -s "$OUT/logs/$name.gpu_mem" ] && peak=$(sort -n "$OUT/logs/$name.gpu_mem" | tail -1)
  echo "$name rc=$rc wall_s=$((SECONDS - t0)) gpu_mem_peak_mib=${peak:-na}" | tee -a "$SUMMARY"
  [ -f "$RUNS/$name/metrics.jsonl" ] && cp "$RUNS/$name/metrics.jsonl" "$OUT/metrics/$name.jsonl"
  return 0
}

train() {  # train NAME LIMIT_S OVERRIDES...: the default recipe through the CLI
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" $PY -m nexrl.driver.cli.train recipes/max_digit/max_digit_tiny.yaml \
    "output_dir=$RUNS/$name" "experiment_name=$name" "$@"
}

if [ -n "${GPU_CHECK_SMALL:-}" ]; then  # CPU dry run of the script itself
  STEPS=6; BIG="model.tiny.hidden_size=128 model.tiny.num_layers=2 model.tiny.num_heads=4 model.tiny.intermediate_size=256"
  MID=$BIG
else
  STEPS=80
  # Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 kv heads, MLP 4864) with
  # the task's 13-token vocabulary: 358M parameters, built from config.
  BIG="model.tiny.hidden_size=896 model.tiny.num_layers=24 model.tiny.num_heads=14 model.tiny.num_kv_heads=2 model.tiny.intermediate_size=4864"
  MID="model.tiny.hidden_size=512 model.tiny.num_layers=8 model.tiny.num_heads=8 model.tiny.intermediate_size=2048"
fi
SHORT="validate.every=0 trainer.save_every=0"

step probe 180 $PY build-support/gpu/probe.py "$OUT/probe.json"
# the tests that need CUDA (skipped on CI), where pytest is importable
if $PY -c "import pytest" 2>/dev/null; then
  step cuda_tests 90 $PY -m pytest -q -p no:cacheprovider tests/unit/types/test_batch.py -k cuda
fi
# the generation engine alone: decoder slots (CUDA graphs) vs HF generate vs continuous batching
step engine 150 $PY build-support/gpu/engine.py "$OUT" ${GPU_CHECK_SMALL:+--small} ${ENGINE_QUICK:+--quick}
tail -9 "$OUT/logs/engine.log"
# a weight handoff's phases: the 358M model's publish (and its one-file baseline), reload,
# and the in-memory handoff (cuda_ipc) next to publish + reload through one server
step handoff 180 $PY build-support/gpu/handoff.py "$OUT" ${GPU_CHECK_SMALL:+--small}
# the default recipe in bf16, and in fp32 (its baseline: the same seeds)
train tiny_bf16 150 trainer.total_train_steps=$STEPS trainer.bf16=true validate.every=20
train tiny_fp32 150 trainer.total_train_steps=$STEPS trainer.bf16=false validate.every=20
# a few hundred million parameters: bf16, ZeRO-1, gradient checkpointing, 1.4 GB snapshots
train qwen05_shape_bf16 200 $BIG $SHORT trainer.total_train_steps=12 trainer.bf16=true \
  trainer.zero_stage=1 trainer.gradient_checkpointing=true trainer.lr=1e-5 \
  trainer.micro_batch_size=32 model.tiny.init_std=0.02
# generation-heavy (64-token answers) with the 358M model: TRL vs ours sync vs one step off
step gen_heavy 300 $PY build-support/gpu/gen_heavy.py "$OUT" ${GPU_CHECK_SMALL:+--small}
tail -8 "$OUT/logs/gen_heavy.log"
for f in /tmp/nexrl-gen-heavy/*.log; do [ -f "$f" ] && cp "$f" "$OUT/logs/gen_heavy_$(basename "$f")"; done
for f in /tmp/nexrl-gen-heavy/*/metrics.jsonl; do  # each run's phase timings
  [ -f "$f" ] && cp "$f" "$OUT/metrics/gen_heavy_$(basename "$(dirname "$f")").jsonl"
done
# ZeRO-3 with optimizer and parameter offload (DeepSpeed's CPU Adam: a JIT build)
train zero3_offload 200 $MID $SHORT trainer.total_train_steps=6 trainer.bf16=true \
  trainer.zero_stage=3 trainer.offload_optimizer=true trainer.offload_param=true \
  trainer.lr=1e-4 trainer.micro_batch_size=64

$PY build-support/gpu/summarize.py "$OUT" | tee "$OUT/summary.md"
tar czf "$OUT/logs.tgz" -C "$OUT" logs metrics
rm -rf "$OUT/logs" "$OUT/metrics"
