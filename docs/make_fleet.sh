#!/usr/bin/env bash
# Regenerates the Table II analogue of docs/fleet.md (about 10 minutes on one busy core):
# both shipped traces, 4 workers, loads 0.6 and 0.9, 10 runs, every router.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
for trace in conversation synthetic; do
  mabp-gym fleet --trace "$trace" --workers 4 --loads 0.6 0.9 --runs 10 --layout routers \
    --markdown "docs/fleet_$trace.md" --json "results/fleet_$trace.json"
done
