"""Adapters of the core to the RL libraries: the Gymnasium env (:mod:`~mabp_gym.envs.env`)
and its batched vector env (:mod:`~mabp_gym.envs.vector_env`), the decentralized PettingZoo
view (:mod:`~mabp_gym.envs.parallel`), the PyG graph of an observation
(:mod:`~mabp_gym.envs.pyg`) and the SB3 policy over it (:mod:`~mabp_gym.envs.sb3`).

Each is thin: spaces, reward, conversion; the dynamics are the core's. The core never
imports them (the harness only for its decentralized runs); the ids are registered in
:mod:`mabp_gym` (serving-fleet mode has its own envs in :mod:`mabp_gym.fleet`).
"""
