"""The evaluation harness: every (policy, load, seed) run on the core, one set of metric
definitions for every policy.

:mod:`~mabp_gym.harness.evaluation` (``evaluate``: runs, their records, the crash-safe
results file, process and Ray dispatch, summaries and stable loads),
:mod:`~mabp_gym.harness.verdicts` (stable load per seed set and horizon),
:mod:`~mabp_gym.harness.decentralized` (the decentralized runs),
:mod:`~mabp_gym.harness.bench` (``mabp-gym bench``) and the figures
(:mod:`~mabp_gym.harness.plots`, :mod:`~mabp_gym.harness.plots_occupation`). It imports the
core and the policy registry, never the CLI.
"""
