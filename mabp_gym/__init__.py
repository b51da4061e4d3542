"""mabp-gym: stateful foundation-model service networks (SFMSN) for scheduling research.

The simulator core (workloads, state, controls, the one-slot transition, the shared
projection and the capacity LPs) imports only numpy and scipy.
"""

from __future__ import annotations

from mabp_gym.capacity import capacity
from mabp_gym.control import Control, InfeasibleControlError, check_control
from mabp_gym.projection import project
from mabp_gym.simulator import InvariantError, Simulator, SlotOutcome
from mabp_gym.state import SimState
from mabp_gym.workload import Action, Commodity, Link, Node, Signature, Workload
from mabp_gym.workloads import WORKLOADS, make_workload, workload_params

__version__ = "0.1.0"

__all__ = [
    "WORKLOADS",
    "Action",
    "Commodity",
    "Control",
    "InfeasibleControlError",
    "InvariantError",
    "Link",
    "Node",
    "Signature",
    "SimState",
    "Simulator",
    "SlotOutcome",
    "Workload",
    "capacity",
    "check_control",
    "make_workload",
    "project",
    "workload_params",
]
