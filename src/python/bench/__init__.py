"""Side-by-side runs of ``nexrl train`` and TRL's ``GRPOTrainer`` on one workload: the
harness the benchmarks (tests/benchmarks) and the GPU check (build-support/gpu) share.
Not part of nexrl: nothing under ``nexrl`` imports it."""
