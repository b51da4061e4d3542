#!/usr/bin/env bash
# Regenerates the tables of docs/fleet.md (about 12 minutes on one busy core): both shipped
# traces and the synthetic agentic-session trace, 4 workers, loads 0.6 and 0.9, 10 runs.
# The Markdown tables land in results/fleet_*.md; docs/fleet.md holds copies of them.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
for trace in conversation synthetic; do
  mabp-gym fleet --trace "$trace" --fleet-size 4 --loads 0.6 0.9 --runs 10 --layout routers \
    --markdown "results/fleet_$trace.md" --json "results/fleet_$trace.json"
done
python -c "from mabp_gym.fleet import agentic_session_trace, write_mooncake
write_mooncake(agentic_session_trace(3000, sessions=150, seed=0), 'results/agentic.jsonl.gz')"
mabp-gym fleet --trace results/agentic.jsonl.gz --fleet-size 4 --loads 0.6 0.9 --runs 10 \
  --layout routers --routers jsq bp affinity sglang dynamo-t0 llm-d vllm-loadaware \
  aibrix mabp-route mabp-route-exact oracle-ttft --set agentic_fraction=1 --set tool_depth=2 \
  --markdown results/fleet_agentic.md --json results/fleet_agentic.json
