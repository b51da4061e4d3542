#!/usr/bin/env bash
# Regenerates every number and figure of docs/results.md (about 15 minutes on 2 cores).
# Results stream to results/*.jsonl; rerunning skips the runs already there.
set -euo pipefail
cd "$(dirname "$0")/.."
POLICIES="sp jsq bp cost-bp greedycache-bp gnn learn-mabp mabp oracle-sur mabp-no-transition mabp-no-reuse mabp-no-retention"
mabp-gym table --policies $POLICIES --out results/table1.jsonl \
  --markdown docs/table1.md --csv docs/table1.csv --no-progress
mabp-gym eval --policy bp --no-memory --loads 0.1:0.5:0.1 --out results/nomem.jsonl --no-progress
mabp-gym sweep --param nu --values 0 1 2 5 10 20 --policies mabp --at 0.6 \
  --out results/nu.jsonl --no-progress
mabp-gym sweep --workload separation --param K --values 1 2 4 8 16 --policies bp mabp --seeds 0 1 2 3 \
  --at 0.5 --out results/k.jsonl --no-progress
mabp-gym sweep --param beta --values 0.05 0.1 0.2 0.3 0.4 0.5 --policies cost-bp mabp \
  --at 0.5 --out results/beta.jsonl --no-progress
mabp-gym sweep --param skew --values 0.5 1.0 1.5 2.0 --policies cost-bp mabp \
  --at 0.5 --out results/skew.jsonl --no-progress
for workload in rag moe agentic; do
  mabp-gym eval --policy mabp --workload "$workload" --loads 0.5 0.85 \
    --out "results/$workload.jsonl" --no-progress
done
mabp-gym plot --results results/*.jsonl --out-dir docs/figures
