#!/bin/bash
# Alternating processes: LM :cpu step with and without XLA:CPU's YNNPACK reduce fusions.
cd /work/main
for round in 1 2; do
  for flag in "" "--xla_cpu_experimental_ynn_fusion_type=-reduce"; do
    XLA_FLAGS="$flag" timeout 300 .venv/bin/python scripts/benchmark.py --task=lm --config=configs/lm/shakespeare_char.py:cpu --config.data.text_file=unused --encodings=learned --steps_per_window=5 --windows=8 2>&1 | grep -E "^ *learned " | tail -1 | sed "s|^|round $round flag '$flag': |"
  done
done
