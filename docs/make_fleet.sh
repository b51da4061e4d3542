#!/usr/bin/env bash
# Regenerates the tables of docs/fleet.md: the simple engine on both shipped traces and the
# synthetic agentic-session trace, 4 workers, loads 0.6 and 0.9, 10 runs (about 6 minutes on
# one busy core); then the step engine on both traces and on the conversation trace with its
# bursts spread, loads 0.5 and 0.7, 10 runs (about 27 minutes; --out keeps finished runs).
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
  --layout routers --routers round-robin jsq lor bp affinity sglang dynamo-t0 llm-d vllm-loadaware \
  aibrix mabp-route mabp-route-exact oracle-ttft --set agentic_fraction=1 --set tool_depth=2 \
  --markdown results/fleet_agentic.md --json results/fleet_agentic.json
step_routers=(round-robin jsq lor bp sglang sglang-lib-default dynamo-t0 llm-d vllm-loadaware aibrix mabp-route
  mabp-route-exact oracle-ttft)
for trace in conversation synthetic conversation-spread; do
  spread=()
  [ "$trace" = conversation-spread ] && spread=(--spread-bursts)
  mabp-gym fleet --trace "${trace%-spread}" "${spread[@]}" --fleet-size 4 --loads 0.5 0.7 \
    --runs 10 --engine step --layout routers --routers "${step_routers[@]}" \
    --markdown "results/fleet_step10_$trace.md" --out "results/fleet_step10_$trace.jsonl"
done
