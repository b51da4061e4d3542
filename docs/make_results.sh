#!/usr/bin/env bash
# Regenerates every number and figure of docs/results.md (benchmark v3; v2's verdict study).
# Results stream to results/*.jsonl; rerunning skips the runs already there, and
# `mabp-gym table --from-results` re-tabulates without running anything.
# Cost on 2 cores: Table I about 16 minutes (2026-12-04; Oracle-Sur and the GNN dominate), the seed-set
# check about 1 hour, the rest about 10 minutes (benchmarks/RESULTS.md has the figures).
set -euo pipefail
cd "$(dirname "$0")/.."
POLICIES="sp jsq bp cost-bp greedycache-bp gnn learn-mabp mabp frame-mabp residual-mabp oracle-sur mabp-no-transition mabp-no-reuse mabp-no-retention"
SEEDS_A="100 101 102 103 104"

# Table I (verdict v4; the same cells as v3's, docs/results.md): both verdicts from the same 4,000-slot runs (the paper load
# reads their first 600 slots), loads 0.05-1.0 in steps of 0.05, each policy stopped at its
# first growing load; fixed-load metrics at 0.85. About 15 minutes on one worker here.
mabp-gym table --search --policies $POLICIES --loads 0.05:1.0:0.05 --seeds $SEEDS_A \
  --horizon 4000 --at 0.85 --out results/table1_v3.jsonl --no-progress
# Oracle-Sur's row below 0.85.
mabp-gym eval --policy oracle-sur --loads 0.05:0.8:0.05 --seeds $SEEDS_A --horizon 4000 \
  --out results/table1_v3.jsonl --no-progress
# The cells the 4,000-slot runs cannot decide, rerun at twice the horizon up to 16,000
# slots (per-policy horizons, verdict v3): each policy's first failing loads.
cp results/table1_v3.jsonl results/table1_v3_long.jsonl
LONG_ARGS="--seeds $SEEDS_A --horizon 4000 --until-decided 16000 --out results/table1_v3_long.jsonl --no-progress"
mabp-gym eval --policy sp --loads 0.2 $LONG_ARGS
mabp-gym eval --policy jsq --loads 0.4 $LONG_ARGS
mabp-gym eval --policy bp cost-bp --loads 0.45 $LONG_ARGS
mabp-gym eval --policy greedycache-bp --loads 0.5 0.55 0.6 0.65 $LONG_ARGS
mabp-gym eval --policy mabp-no-retention --loads 0.75 0.8 $LONG_ARGS
mabp-gym eval --policy gnn --loads 0.95 $LONG_ARGS
mabp-gym table --from-results --policies $POLICIES --loads 0.05:1.0:0.05 --seeds $SEEDS_A \
  --horizon 4000 --at 0.85 --out results/table1_v3.jsonl \
  --long results/table1_v3_long.jsonl --long-horizon longest \
  --markdown docs/table1.md --csv docs/table1.csv --no-progress

# Benchmark v2's verdict study (docs/results.md section 2; not rerun under v3): the stable
# load on more seed sets and horizons, from the same Table I runs.
# The stable load on two more disjoint seed sets, at the loads around each boundary, and
# its sensitivity to the horizon (cuts of the same runs).
mabp-gym eval --policy sp --loads 0.15:0.3:0.05 --seeds 105 106 107 108 109 110 111 112 113 114 \
  --horizon 4000 --out results/seedsets.jsonl --no-progress
mabp-gym eval --policy jsq --loads 0.25:0.4:0.05 --seeds 105 106 107 108 109 110 111 112 113 114 \
  --horizon 4000 --out results/seedsets.jsonl --no-progress
mabp-gym eval --policy bp cost-bp greedycache-bp --loads 0.35:0.5:0.05 \
  --seeds 105 106 107 108 109 110 111 112 113 114 --horizon 4000 --out results/seedsets.jsonl \
  --no-progress
mabp-gym eval --policy mabp-no-retention --loads 0.65:0.75:0.05 \
  --seeds 105 106 107 108 109 110 111 112 113 114 --horizon 4000 --out results/seedsets.jsonl \
  --no-progress
mabp-gym eval --policy gnn learn-mabp mabp frame-mabp oracle-sur mabp-no-transition mabp-no-reuse \
  --loads 0.85:1.0:0.05 --seeds 105 106 107 108 109 110 111 112 113 114 \
  --horizon 4000 --out results/seedsets.jsonl --no-progress
mabp-gym verdicts --results results/table1_v3.jsonl results/seedsets.jsonl \
  --horizons 600 1000 2000 3000 4000 --seed-sets 100:105 105:110 110:115 \
  --markdown docs/verdicts.md

# Long runs (section 2 of docs/results.md): 15 seeds at 8,000 slots around each boundary,
# GreedyCache-BP to 16,000 (it stabilizes late). About 2 hours on 2 cores, Oracle-Sur's
# 8,000-slot runs another hour.
LONG="100 101 102 103 104 105 106 107 108 109 110 111 112 113 114"
mabp-gym eval --policy greedycache-bp --loads 0.4 0.45 0.5 0.55 0.6 0.65 --seeds $LONG \
  --horizon 8000 --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy frame-mabp --loads 0.95 1.0 1.05 --seeds $LONG --horizon 8000 \
  --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy gnn --loads 0.85 0.9 0.95 1.0 --seeds $LONG --horizon 8000 \
  --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy bp cost-bp --loads 0.4 0.45 --seeds $LONG --horizon 8000 \
  --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy mabp learn-mabp mabp-no-transition mabp-no-reuse --loads 0.95 1.0 \
  --seeds $LONG --horizon 8000 --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy mabp-no-retention --loads 0.7 0.75 --seeds $LONG --horizon 8000 \
  --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy mabp-no-retention --loads 0.65 --seeds $LONG --horizon 8000 \
  --out results/noret8k.jsonl --no-progress
mabp-gym eval --policy sp --loads 0.15 0.2 --seeds $LONG --horizon 8000 \
  --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy jsq --loads 0.35 0.4 --seeds $LONG --horizon 8000 \
  --out results/seedsets8k.jsonl --no-progress
mabp-gym eval --policy greedycache-bp --loads 0.55 0.6 0.65 0.7 --seeds $LONG --horizon 16000 \
  --out results/greedy16k.jsonl --no-progress
mabp-gym eval --policy mabp-no-retention --loads 0.65 0.7 0.75 --seeds $LONG --horizon 16000 \
  --out results/noret16k.jsonl --no-progress
mabp-gym eval --policy mabp learn-mabp frame-mabp gnn --loads 0.96 0.97 0.98 0.99 \
  --seeds 100 101 102 103 104 --horizon 8000 --out results/fine8k.jsonl --no-progress
# The stable-load verdict's horizon (docs/results.md section 2): 12,000 slots, 15 seeds, at
# the loads around each Table I policy's boundary (GreedyCache-BP's 0.55-0.70 and
# MABP-no-retention's come from their 16,000-slot runs above, cut at 12,000); the 4,000-slot
# Table I grid decides the loads below. About 40 CPU-minutes, Oracle-Sur another 40.
mabp-gym eval --policy sp --loads 0.15 0.2 --seeds $LONG --horizon 12000 \
  --out results/long12k.jsonl --no-progress
mabp-gym eval --policy jsq --loads 0.35 0.4 --seeds $LONG --horizon 12000 \
  --out results/long12k.jsonl --no-progress
mabp-gym eval --policy bp cost-bp --loads 0.4 0.45 --seeds $LONG --horizon 12000 \
  --out results/long12k.jsonl --no-progress
mabp-gym eval --policy mabp learn-mabp frame-mabp gnn --loads 0.95 --seeds $LONG \
  --horizon 12000 --out results/long12k.jsonl --no-progress
mabp-gym eval --policy mabp-no-transition mabp-no-reuse --loads 0.95 --seeds $LONG \
  --horizon 12000 --out results/long12k_ablations.jsonl --no-progress
mabp-gym eval --policy greedycache-bp --loads 0.45 0.5 --seeds $LONG --horizon 12000 \
  --out results/long12k_greedy.jsonl --no-progress
mabp-gym eval --policy oracle-sur --loads 0.95 --seeds $LONG --horizon 12000 \
  --out results/long12k_oracle.jsonl --no-progress
mabp-gym verdicts --results results/long12k.jsonl results/long12k_oracle.jsonl \
  results/long12k_greedy.jsonl results/long12k_ablations.jsonl results/greedy16k.jsonl \
  results/noret16k.jsonl \
  --horizons 4000 8000 12000 \
  --seed-sets 100:105 105:110 110:115 --markdown docs/verdicts_12k.md
mabp-gym table --from-results --search --policies $POLICIES --loads 0.05:1.0:0.05 \
  --seeds $SEEDS_A --horizon 4000 --at 0.85 --out results/table1_v3.jsonl \
  --long results/long12k.jsonl results/long12k_oracle.jsonl results/long12k_greedy.jsonl \
  results/long12k_ablations.jsonl results/greedy16k.jsonl results/noret16k.jsonl \
  --long-horizon 12000 \
  --markdown results/table1_v2_12k.md --csv results/table1_v2_12k.csv --no-progress
mabp-gym verdicts --results results/noret16k.jsonl --horizons 4000 8000 12000 16000 \
  --seed-sets 100:105 105:110 110:115 --markdown docs/verdicts_noretention16k.md
mabp-gym verdicts --results results/seedsets8k.jsonl results/noret8k.jsonl \
  --horizons 2000 4000 6000 8000 --seed-sets 100:105 105:110 110:115 \
  --markdown docs/verdicts_long.md
mabp-gym verdicts --results results/greedy16k.jsonl --horizons 4000 8000 12000 16000 \
  --seed-sets 100:105 105:110 110:115 --markdown docs/verdicts_greedy16k.md

# The no-memory system, the paper's sweeps (600 slots, fixed loads).
mabp-gym eval --policy bp --no-memory --loads 0.1:0.5:0.05 --horizon 4000 \
  --out results/nomem.jsonl --no-progress
mabp-gym eval --policy mabp mabp-no-retention --loads 0.6 0.65 0.7 0.75 --seeds 10 11 12 13 14 \
  --out results/retention.jsonl --no-progress
mabp-gym eval --policy mabp oracle-sur --loads 0.1 0.3 --seeds 10 11 12 \
  --out results/oracle_low.jsonl --no-progress
mabp-gym sweep --param nu --values 0 1 2 5 10 20 --policies mabp --at 0.5 \
  --out results/nu.jsonl --no-progress
mabp-gym sweep --param nu --values 0 5 20 --policies bp cost-bp --at 0.3 \
  --out results/nu_costbp.jsonl --no-progress
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
mabp-gym plot --results results/table1_v3.jsonl results/nu.jsonl results/k.jsonl \
  results/beta.jsonl results/skew.jsonl results/rag.jsonl results/moe.jsonl \
  results/agentic.jsonl --out-dir docs/figures
mabp-gym capacity --workload mixed --reference occ --figure docs/figures/fig2b_occupation.png
