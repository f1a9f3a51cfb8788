"""`report.html`: one self-contained page (inline CSS, embedded PNG plots and thumbnails, no scripts).

Sections: the suite table; then one collapsible section (`<details>`) per scenario, failed
scenarios first and open, passing ones closed: its verdict, reproduction command, findings, its
metrics per step (plots for several steps, a value table for one step; metrics meaningless in the
scenario's server mode are left out with a sentence saying why), and the trace view of each
logical rollout (its physical rows as coloured token spans, and each row's image history).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from compactsim.harness.audit import Finding
from compactsim.harness.audit.findings import json_value
from compactsim.harness.report.plots import HIDDEN_IN_MODE, HIDDEN_REASON, format_metric_plot, metrics_for_mode, plotted_metrics
from compactsim.harness.report.records import RolloutView, RowView, ScenarioRecord, SuiteRecord

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1a202c;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #cbd5e0}
h3{font-size:14px;margin:14px 0 4px}
details.scenario{border-top:1px solid #cbd5e0;margin:10px 0}details.scenario>summary{cursor:pointer;padding:6px 0}
details.scenario>summary h2{display:inline;border:0;margin:0}details.traces>summary{cursor:pointer;font-weight:600;margin:10px 0}
table.values td.key{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{border:1px solid #e2e8f0;padding:3px 8px;text-align:left}
th{background:#edf2f7}td.num{text-align:right}.pass{color:#276749;font-weight:600}.fail{color:#c53030;font-weight:700}
.meta{color:#4a5568;font-size:13px}.repro{background:#f7fafc;border:1px solid #e2e8f0;padding:4px 8px;display:inline-block}
.rollout{border:1px solid #e2e8f0;border-radius:6px;padding:6px 10px;margin:8px 0}
.rowline{margin:4px 0 8px;line-height:1.9;word-break:break-all}
.rowhead{font-size:12px;color:#2d3748;margin-top:6px}
.tok{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11px;padding:1px 2px;border-radius:3px;
 margin-right:1px;border:1px solid transparent;white-space:pre-wrap}
.prompt{background:#edf2f7;color:#4a5568}.sampled{background:#c6f6d5;color:#22543d}
.image{background:#bee3f8;color:#2a4365}.boundary{border-color:#dd6b20;border-width:2px}
.sentinel{background:#1a202c;color:#fefcbf}
.padding{background:repeating-linear-gradient(45deg,#f7fafc,#f7fafc 4px,#e2e8f0 4px,#e2e8f0 8px);color:#a0aec0}
.flagged{outline:2px solid #e53e3e}.elided{color:#a0aec0}
.legend span{margin-right:8px}.media{display:flex;gap:8px;flex-wrap:wrap;margin:2px 0 4px}
.media figure{margin:0;font-size:10px;text-align:center}.media img{image-rendering:pixelated;width:64px;border:1px solid #cbd5e0}
.nothumb{width:64px;height:48px;display:flex;align-items:center;justify-content:center;background:#f7fafc;border:1px dashed #cbd5e0}
"""
_LEGEND = ("prompt", "sampled", "image", "boundary", "sentinel", "padding", "flagged")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _anchor(name: str) -> str:
    return "scenario-" + "".join(c if c.isalnum() or c == "-" else "-" for c in name)


def _short(value: Any, limit: int = 160) -> str:
    text = repr(json_value(value)) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_suite_table(suite: SuiteRecord) -> str:
    """The suite table: scenario, verdict, expected, observed, steps, rows, tokens, seconds, findings."""
    head = "".join(f"<th>{h}</th>" for h in ("scenario", "verdict", "expected", "observed", "steps", "rows", "tokens",
                                             "seconds", "findings"))
    body = []
    for s in suite.scenarios:
        body.append(
            f"<tr><td><a href='#{_anchor(s.name)}'>{_e(s.name)}</a></td>"
            f"<td class='{'pass' if s.passed else 'fail'}'>{s.verdict}</td><td>{_e(s.expected)}</td>"
            f"<td>{_e(s.observed)}</td><td class='num'>{s.steps}</td><td class='num'>{s.rows}</td>"
            f"<td class='num'>{s.tokens}</td><td class='num'>{s.seconds:.2f}</td>"
            f"<td class='num'>{len(s.findings)}</td></tr>"
        )
    return f"<table class='suite'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def format_findings(findings: Sequence[Finding], limit: int = 50) -> str:
    """A findings table (the first `limit`), or a line saying there are none."""
    if not findings:
        return "<p class='pass'>No findings: every audited row, route and metric matches the oracle.</p>"
    rows = []
    for f in findings[:limit]:
        rows.append(
            f"<tr><td><code>{_e(f.check)}</code></td><td class='num'>{'' if f.step is None else f.step}</td>"
            f"<td><code>{_e(f.row or '')}</code></td><td class='num'>{'' if f.position is None else f.position}</td>"
            f"<td class='mono'>{_e(_short(f.expected))}</td><td class='mono'>{_e(_short(f.actual))}</td>"
            f"<td>{_e(f.message)}</td></tr>"
        )
    more = f"<p class='meta'>… and {len(findings) - limit} more (see summary.json)</p>" if len(findings) > limit else ""
    return ("<table class='findings'><thead><tr><th>check</th><th>step</th><th>row</th><th>position</th>"
            "<th>expected</th><th>actual</th><th>message</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            + more)


def format_media(row: RowView, media_urls: Mapping[str, str]) -> str:
    """A row's image history: one thumbnail (or placeholder) per image, in order, with id and pixel digest."""
    if not row.media_ids:
        return "<div class='meta'>no images</div>"
    figs = []
    for k, mid in enumerate(row.media_ids):
        digest = row.pixel_digests[k][:10] if k < len(row.pixel_digests) else "?"
        url = media_urls.get(mid)
        pic = f"<img src='{_e(url)}' alt='{_e(mid)}'>" if url else "<div class='nothumb'>image</div>"
        figs.append(f"<figure>{pic}<figcaption>{k}: {_e(mid[:16])}<br>px {_e(digest)}</figcaption></figure>")
    return f"<div class='media'>{''.join(figs)}</div>"


def format_row(row: RowView, media_urls: Mapping[str, str]) -> str:
    """One physical row: a header line, its token spans and its image history."""
    spans = "".join(
        f"<span class='tok {' '.join(sp.classes)}' title='{sp.start}–{sp.end - 1}: {_e(' '.join(sp.classes))}'>"
        f"{_e(sp.text)}</span>"
        for sp in row.spans
    )
    sent = f", sentinel at {list(row.sentinel_positions)}" if row.sentinel_positions else ""
    flag = f", <span class='fail'>flagged at {list(row.flagged_positions)}</span>" if row.flagged_positions else ""
    head = (f"<div class='rowhead'>row {row.row_index} · <code>{_e(row.physical_trace_id or 'padding')}</code> · "
            f"trace {row.trace_index} · {row.length} tokens{sent}{flag}</div>")
    media = format_media(row, media_urls) if row.physical_trace_id is not None else ""
    return f"{head}<div class='rowline'>{spans}</div>{media}"


def format_rollout(view: RolloutView, media_urls: Mapping[str, str]) -> str:
    """A logical rollout and its physical rows."""
    if view.rollout_id is None:
        title = f"padding rows ({len(view.rows)})"
    else:
        title = (f"<code>{_e(view.rollout_id)}</code> · reward {view.reward} · advantage "
                 f"{'' if view.advantage is None else f'{view.advantage:.6g}'} · {len(view.rows)} row(s)")
    rows = "".join(format_row(r, media_urls) for r in view.rows)
    return f"<div class='rollout'><div><b>step {view.step}</b> · {title}</div>{rows}</div>"


def format_legend() -> str:
    return "<p class='legend'>" + "".join(f"<span class='tok {c}'>{c}</span>" for c in _LEGEND) + "</p>"


def _metric_value(value: Any) -> str:
    """A metric as the table shows it: integers exactly, floats to 10 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return format(value, ".10g") if math.isfinite(value) else str(value)


def format_metric_table(metrics: Mapping[str, Any], keys: Sequence[str]) -> str:
    """One step's values of `keys` (those it reports) as a two-column table, instead of one-point plots."""
    rows = "".join(f"<tr><td class='key'>{_e(k)}</td><td class='num'>{_e(_metric_value(metrics[k]))}</td></tr>"
                   for k in keys if k in metrics)
    return f"<table class='values'><thead><tr><th>metric</th><th>value</th></tr></thead><tbody>{rows}</tbody></table>"


def format_metrics(s: ScenarioRecord, *, plot: str | None) -> str:
    """A scenario's metrics: a plot for several steps, a value table for one, and why a hidden metric is missing."""
    keys = metrics_for_mode(s.mode)
    notes = [HIDDEN_REASON[k] for k in HIDDEN_IN_MODE.get(s.mode or "", ())
             if any(k in m for m in s.step_metrics) and k in HIDDEN_REASON]
    if len(s.step_metrics) == 1 and plotted_metrics(s.step_metrics, keys):
        body = format_metric_table(s.step_metrics[0], plotted_metrics(s.step_metrics, keys))
        title = "Metrics (one step)"
    elif plot:
        body = f"<img alt='metrics of {_e(s.name)}' src='data:image/png;base64,{plot}'>"
        title = "Metrics per step"
    else:
        return "<p class='meta'>no step metrics</p>"
    note = "".join(f"<p class='meta note'>{_e(n)}</p>" for n in notes)
    return f"<h3>{title}</h3>{body}{note}"


def format_scenario(s: ScenarioRecord, *, plot: str | None) -> str:
    """One scenario's collapsible section: open when it failed, closed when it passed."""
    err = ""
    if s.error is not None:
        err = (f"<p class='meta'>stopped by <code>{_e(s.error.code)}</code> in {_e(s.error.stage)} at step "
               f"{s.error.step} (rollout <code>{_e(s.error.rollout_id)}</code>, turn {s.error.turn_id}): "
               f"{_e(s.error.message)}</p>")
    traces = "".join(format_rollout(v, s.media_urls) for v in s.traces)
    trace_html = (f"<details class='traces'{'' if s.passed else ' open'}><summary>Trace view ({len(s.traces)} "
                  f"rollout view(s))</summary>{format_legend()}{traces}</details>") if traces else ""
    state = "" if s.passed else " open"
    return (
        f"<details class='scenario' id='{_anchor(s.name)}'{state}><summary><h2>{_e(s.name)} — "
        f"<span class='{'pass' if s.passed else 'fail'}'>{s.verdict}</span></h2> <span class='meta'>"
        f"{_e(s.outcome)}</span></summary>"
        f"<p>{_e(s.purpose)}</p>"
        f"<p class='meta'>tags: {_e(', '.join(s.tags) or '—')} · flavour {_e(s.flavour)}"
        f"{' · ' + _e(s.mode) + ' mode' if s.mode else ''} · expected {_e(s.expected)}"
        f" · observed {_e(s.observed)} · {s.steps} steps · {s.rows} rows · {s.tokens} tokens</p>"
        f"<p>reproduce: <code class='repro'>{_e(s.reproduce)}</code></p>{err}"
        f"<h3>Findings</h3>{format_findings(s.findings)}{format_metrics(s, plot=plot)}{trace_html}</details>"
    )


def default_plots(suite: SuiteRecord) -> dict[str, str | None]:
    """Plots of the scenarios with two or more steps (one-step scenarios get a value table instead)."""
    return {s.name: format_metric_plot(s.step_metrics, title=s.name, keys=metrics_for_mode(s.mode))
            for s in suite.scenarios if len(s.step_metrics) >= 2}


def format_report_html(suite: SuiteRecord, *, plots: Mapping[str, str | None] | None = None) -> str:
    """The whole page; `plots` (scenario → base64 PNG) defaults to `default_plots`. Failed scenarios come first."""
    if plots is None:
        plots = default_plots(suite)
    passed = sum(1 for s in suite.scenarios if s.passed)
    verdict = "pass" if suite.passed else "fail"
    versions = ", ".join(f"{k} {v}" for k, v in sorted(suite.versions.items()))
    gym = suite.gym
    ordered = sorted(suite.scenarios, key=lambda s: s.passed)  # stable: failed first, each group in run order
    sections = "".join(format_scenario(s, plot=plots.get(s.name)) for s in ordered)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>compactsim report</title><style>{_CSS}</style></head><body>"
        f"<h1>compactsim report — <span class='{verdict}'>{passed}/{len(suite.scenarios)} scenarios met their verdict"
        "</span></h1>"
        f"<p class='meta'>seed {_e('each scenario’s own' if suite.seed is None else suite.seed)}"
        f" · backend <code>{_e(suite.backend)}</code> · device {_e(suite.device)}"
        f" · gym: {_e(gym.get('producer'))}, flavour {_e(gym.get('contract_flavour'))}"
        f"{', revision ' + _e((gym.get('revision') or {}).get('spec')) if gym.get('revision') else ''}</p>"
        f"<p class='meta'>{_e(versions)}</p>"
        f"{format_suite_table(suite)}"
        "<p class='meta'>Below, one section per scenario: failed scenarios first and open, passing ones collapsed "
        "(click a name to open it).</p>"
        f"{sections}</body></html>\n"
    )


__all__ = [
    "default_plots",
    "format_findings",
    "format_legend",
    "format_media",
    "format_metric_table",
    "format_metrics",
    "format_report_html",
    "format_rollout",
    "format_row",
    "format_scenario",
    "format_suite_table",
]
