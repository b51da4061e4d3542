"""Fig. 2b: the occupation-measure bound against the memory budget and the Zipf skew.

The values are computed here (they are LPs, no simulation): ``occupation_curve`` returns
one record per ``(beta, skew)`` with the relaxation of SPEC 9.1 (with and without the
budget-hull inequalities), the no-memory and all-hit capacities; ``plot_occupation``
draws them, with the exact LP of paper Thm. 1 on ``boundary`` as a small-instance check.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mabp_gym.core.capacity import capacity
from mabp_gym.core.occupation import occupation_bound
from mabp_gym.core.workloads import make_workload

BETAS = (
    0.02,
    0.04,
    0.05,
    0.06,
    0.0625,
    0.08,
    0.1,
    0.12,
    0.125,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
)
SKEWS = (0.0, 0.5, 1.0, 1.5, 2.0)


def occupation_curve(
    workload: str = "mixed", betas: Sequence[float] = BETAS, skews: Sequence[float] = (1.0,)
) -> list[dict[str, Any]]:
    """``occ / full`` on a built-in service-graph workload over a grid of budgets and skews.

    Returns:
        One record per ``(beta, skew)``: ``occ`` (relaxation with the budget hull),
        ``occ_spec`` (SPEC 9.1's constraints as written), ``nomem``, ``full`` (requests per
        slot) and the ratios ``occ_ratio``, ``occ_spec_ratio``, ``nomem_ratio``.
    """
    records = []
    for skew in skews:
        for beta in betas:
            wl = make_workload(workload, beta=beta, skew=skew)
            full = capacity(wl, "full")
            occ = occupation_bound(wl)
            spec = occupation_bound(wl, budget_hull=False)
            nomem = capacity(wl, "nomem")
            records.append(
                {
                    "workload": workload,
                    "beta": beta,
                    "skew": skew,
                    "full": full,
                    "occ": occ,
                    "occ_spec": spec,
                    "nomem": nomem,
                    "occ_ratio": occ / full,
                    "occ_spec_ratio": spec / full,
                    "nomem_ratio": nomem / full,
                }
            )
    return records


def boundary_curve(
    betas: Sequence[float] = (0.25, 0.5, 0.75, 1.0), mu: float = 2.0
) -> list[dict[str, Any]]:
    """Exact LP (paper (6)-(9)) against the relaxation on the ``boundary`` workload."""
    records = []
    for beta in betas:
        wl = make_workload("boundary", beta=beta, mu=mu)
        full = capacity(wl, "full")
        records.append(
            {
                "workload": "boundary",
                "beta": beta,
                "mu": mu,
                "full": full,
                "exact": occupation_bound(wl, exact=True),
                "occ": occupation_bound(wl),
                "nomem": capacity(wl, "nomem"),
            }
        )
    return records


def plot_occupation(
    path: str | Path,
    workload: str = "mixed",
    betas: Sequence[float] = BETAS,
    skews: Sequence[float] = SKEWS,
) -> list[dict[str, Any]]:
    """Draw Fig. 2b as a PNG at ``path`` and return the values it shows.

    Left: ``occ / full`` against ``beta`` at the default skew, with SPEC 9.1's literal
    constraints and the no-memory ratio. Middle: ``occ / full`` against the skew at three
    budgets. Right: the exact LP against the relaxation on ``boundary``.
    """
    from mabp_gym.harness.plots import _figure

    by_beta = occupation_curve(workload, betas, (1.0,))
    picks = (0.05, 0.1, 0.2)
    by_skew = occupation_curve(workload, picks, skews)
    small = boundary_curve() + boundary_curve(mu=2.5)
    fig, (left, middle, right) = _figure(13.0, 3.6, cols=3)
    xs = [r["beta"] for r in by_beta]
    left.plot(xs, [r["occ_ratio"] for r in by_beta], "o-", label="occ (budget hull)")
    left.plot(xs, [r["occ_spec_ratio"] for r in by_beta], "s--", label="occ, SPEC 9.1 as written")
    left.plot(xs, [r["nomem_ratio"] for r in by_beta], ":", color="gray", label="no memory")
    left.set_xscale("log")
    left.set_xlabel("memory budget beta (fraction of B_max)")
    left.set_ylabel("bound / all-hit LP")
    left.set_title(f"(b) {workload}: occupation bound vs budget")
    left.legend(fontsize=7)
    for beta in picks:
        rows = [r for r in by_skew if r["beta"] == beta]
        middle.plot(
            [r["skew"] for r in rows],
            [r["occ_ratio"] for r in rows],
            "o-",
            label=f"beta = {beta:g}",
        )
    middle.set_xlabel("Zipf skew s")
    middle.set_ylabel("occ / all-hit LP")
    middle.set_ylim(0, 1.05)
    middle.set_title("vs skew (the fluid bound ignores popularity)")
    middle.legend(fontsize=7)
    for mu, style in ((2.0, "-"), (2.5, "--")):
        rows = [r for r in small if r["mu"] == mu]
        bx = [r["beta"] for r in rows]
        right.plot(
            bx,
            [r["exact"] / r["full"] for r in rows],
            "o" + style,
            label=f"exact LP (6)-(9), mu = {mu:g}",
        )
        right.plot(
            bx, [r["occ"] / r["full"] for r in rows], "x" + style, label=f"relaxation, mu = {mu:g}"
        )
    rows = [r for r in small if r["mu"] == 2.0]
    right.plot(
        [r["beta"] for r in rows],
        [r["nomem"] / r["full"] for r in rows],
        ":",
        color="gray",
        label="no memory",
    )
    right.set_xlabel("memory budget beta")
    right.set_ylim(0, 1.05)
    right.set_title("boundary: exact LP vs relaxation")
    right.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return by_beta + by_skew + small
