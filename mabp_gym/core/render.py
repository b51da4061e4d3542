"""Text and image views of a simulator state (the env's ``render`` modes)."""

from __future__ import annotations

import numpy as np

from mabp_gym.core.simulator import SlotOutcome
from mabp_gym.core.state import SimState
from mabp_gym.core.workload import Workload
from mabp_gym.extras import require


def render_ansi(workload: Workload, state: SimState, last: SlotOutcome | None) -> str:
    """A table of nodes: backlog, unit in service, memory used / budget, objects held."""
    ix = workload.index
    queues = state.backlog_matrix(workload).sum(axis=1)
    lines = [
        f"{workload.name} slot {state.t}  backlog {state.units}"
        + (
            f"  served {last.served} hits {last.hits} completed {last.completed} "
            f"penalty {last.penalty:.4f}"
            if last
            else ""
        ),
        f"{'node':<8} {'role':<10} {'backlog':>7} {'busy':>4} {'memory':>11}  objects",
    ]
    for i, node in enumerate(workload.nodes):
        held = [workload.signatures[s].name for s in np.flatnonzero(state.holder[i] >= 0)]
        memory = f"{state.memory_used[i]:g}/{ix.budget[i]:g}"
        busy = "yes" if state.service_action[i] >= 0 else ""
        lines.append(
            f"{node.name:<8} {node.role:<10} {int(queues[i]):>7} {busy:>4} "
            f"{memory:>11}  {' '.join(held)}"
        )
    return "\n".join(lines) + "\n"


def _layout(workload: Workload) -> np.ndarray:
    """Node positions: columns by role order, spread vertically within a column."""
    order = ("ingress", "retriever", "expert", "server", "generator", "tool", "verifier")
    column = {role: k for k, role in enumerate(order)}
    xs = np.array([column[node.role] for node in workload.nodes], dtype=float)
    ys = np.zeros(len(xs))
    for x in np.unique(xs):
        members = np.flatnonzero(xs == x)
        ys[members] = np.linspace(0, 1, len(members) + 2)[1:-1]
    return np.stack([xs, ys], axis=1)


def render_rgb(workload: Workload, state: SimState) -> np.ndarray:
    """An RGB image ``(H, W, 3)`` uint8: the graph, queue bars and memory bars per node."""
    require("plot", 'render_mode="rgb_array"')
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ix = workload.index
    queues = state.backlog_matrix(workload).sum(axis=1)
    fig = Figure(figsize=(8, 4), dpi=80)
    canvas = FigureCanvasAgg(fig)
    graph, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    pos = _layout(workload)
    for src, dst in zip(ix.link_src, ix.link_dst, strict=True):
        graph.annotate(
            "",
            xy=pos[dst],
            xytext=pos[src],
            arrowprops={"arrowstyle": "->", "color": "0.6", "lw": 0.8},
        )
    scale = 200.0 + 20.0 * np.sqrt(queues)
    graph.scatter(
        pos[:, 0], pos[:, 1], s=scale, c=np.log1p(queues), cmap="viridis", zorder=3, edgecolors="k"
    )
    for i, node in enumerate(workload.nodes):
        graph.text(pos[i, 0], pos[i, 1] + 0.07, node.name, ha="center", fontsize=8)
    graph.set_title(f"{workload.name}, slot {state.t}", fontsize=9)
    graph.set_axis_off()
    names = [node.name for node in workload.nodes]
    y = np.arange(len(names))
    bars.barh(y + 0.2, queues, height=0.4, label="backlog", color="tab:blue")
    fraction = np.divide(
        state.memory_used, ix.budget, out=np.zeros(len(names)), where=ix.budget > 0
    )
    top = max(1.0, float(queues.max(initial=0)))
    bars.barh(y - 0.2, fraction * top, height=0.4, label="memory (x budget)", color="tab:orange")
    bars.set_yticks(y, names, fontsize=7)
    bars.legend(fontsize=7, loc="lower right")
    bars.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[:, :, :3].copy()
    return image
