"""The evaluation harness: every (policy, load, seed) run on the core, one set of metric
definitions for every policy.

:mod:`~mabp_gym.harness.evaluation` (``evaluate``, ``execute``: a sweep end to end) over
:mod:`~mabp_gym.harness.runs` (what determines a run, its key, the grid, one run),
:mod:`~mabp_gym.harness.results_file` (the crash-safe results file),
:mod:`~mabp_gym.harness.dispatch` (serial, process-pool and Ray dispatch) and
:mod:`~mabp_gym.harness.summaries` (seed means, verdicts, stable loads); beside them
:mod:`~mabp_gym.harness.verdicts` (stable load per seed set and horizon),
:mod:`~mabp_gym.harness.decentralized` (the decentralized runs),
:mod:`~mabp_gym.harness.bench` (``mabp-gym bench``) and the figures
(:mod:`~mabp_gym.harness.plots`, :mod:`~mabp_gym.harness.plots_occupation`). It imports the
core and the policy seam (the decentralized runs also the PettingZoo view and the local
agents), never training or the CLI.
"""
