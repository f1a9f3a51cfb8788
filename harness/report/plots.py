"""Per-step metric plots for the report: matplotlib figures rendered to base64 PNG strings."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence

from compactsim.harness.core import metrics as M

#: Metrics drawn for every scenario when it reports them, one panel each, in this order.
PLOTTED_METRICS: tuple[str, ...] = (
    M.TOKEN_MULT_PROB_ERROR,
    "loss",
    M.GRAD_NORM,
    M.NUM_PHYSICAL_ROWS,
    M.NUM_PADDING_ROWS,
    M.LOGICAL_ADVANTAGES_MEAN,
    M.ADVANTAGES_MEAN,
    M.TOTAL_NUM_TOKENS,
)


#: Metrics meaningless in a server mode, left out of that mode's plots and tables (the report says why).
HIDDEN_IN_MODE: dict[str, tuple[str, ...]] = {"scripted": (M.TOKEN_MULT_PROB_ERROR,)}

#: One sentence per hidden metric, shown where it would have been drawn.
HIDDEN_REASON: dict[str, str] = {
    M.TOKEN_MULT_PROB_ERROR: "token_mult_prob_error is not shown: in scripted mode the generation logprobs come from "
                             "the scenario script, not from the policy, so the trainer's logprobs cannot match them "
                             "(≈ 1 is healthy only in policy mode, where both sides share the weights).",
}


def metrics_for_mode(mode: str | None, keys: Sequence[str] = PLOTTED_METRICS) -> tuple[str, ...]:
    """`keys` without the metrics that mean nothing in `mode` (all of them when the mode is unknown)."""
    hidden = HIDDEN_IN_MODE.get(mode or "", ())
    return tuple(k for k in keys if k not in hidden)


def plotted_metrics(steps: Sequence[Mapping[str, float | int]], keys: Sequence[str] = PLOTTED_METRICS) -> tuple[str, ...]:
    """The keys of `keys` that at least one step reports with a finite value."""
    out = []
    for key in keys:
        if any(key in m and isinstance(m[key], (int, float)) and math.isfinite(float(m[key])) for m in steps):
            out.append(key)
    return tuple(out)


def format_metric_plot(steps: Sequence[Mapping[str, float | int]], *, title: str = "",
                       keys: Sequence[str] = PLOTTED_METRICS) -> str | None:
    """A grid of small line plots (one per reported metric, x = step), as base64 PNG; None without metrics."""
    shown = plotted_metrics(steps, keys)
    if not shown:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    cols = min(4, len(shown))
    rows = math.ceil(len(shown) / cols)
    fig = Figure(figsize=(3.2 * cols, 2.2 * rows), dpi=80)
    for k, key in enumerate(shown):
        ax = fig.add_subplot(rows, cols, k + 1)
        xs = [i for i, m in enumerate(steps) if key in m]
        ys = [float(steps[i][key]) for i in xs]
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color="#2b6cb0")
        ax.set_title(key, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.ticklabel_format(axis="y", useOffset=False)  # 1 + 1e-12 reads as 1, not as an offset
        ax.grid(alpha=0.3)
        if xs:
            ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


__all__ = ["HIDDEN_IN_MODE", "HIDDEN_REASON", "PLOTTED_METRICS", "format_metric_plot", "metrics_for_mode",
           "plotted_metrics"]
