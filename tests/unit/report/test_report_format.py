"""Pure report formatting: summary.json, trace views, the HTML page and the metric plots."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

from compactsim.harness.audit import observed_from_artifact
from compactsim.harness.report import (
    format_metric_plot,
    format_report_html,
    format_summary,
    format_summary_json,
    format_timings,
    rollout_views,
)
from compactsim.harness.report.trace_view import position_classes
from tests.unit.audit.audit_builders import artifact
from tests.unit.report.report_builders import mixed_suite, png_data_url, record, suite


def test_summary_has_stable_keys_and_no_timings():
    data = format_summary(suite())
    assert list(data) == ["format", "seed", "backend", "device", "selection", "versions", "gym", "passed", "counts",
                          "failed", "scenarios"]
    assert data["format"] == "compactsim-summary/1"
    assert data["counts"] == {"scenarios": 1, "passed": 0, "failed": 1, "findings": 1}
    assert data["failed"] == ["audit-fixture"]
    entry = data["scenarios"][0]
    assert entry["findings"][0]["check"] == "row.tokens"
    assert entry["contract_flavour"] == "gym-0.7.0-transport"
    assert "seconds" not in json.dumps(data)
    assert data["gym"]["producer"] == "compactsim-emitter"


def test_summary_json_text_is_sorted_and_repeatable():
    text = format_summary_json(suite())
    assert text == format_summary_json(suite())
    assert text.endswith("}\n")
    assert json.loads(text) == json.loads(json.dumps(format_summary(suite()), sort_keys=True))


def test_timings_hold_the_seconds_per_stage():
    data = json.loads(format_timings(suite(), total_seconds=2.5, extra={"executor": "local"}))
    assert data == {"executor": "local", "scenarios": {"audit-fixture": {"seconds": 1.25, "stages": {"train": 1.0}}},
                    "stage_seconds": {"train": 1.0}, "total_seconds": 2.5}


def test_trace_view_classes_boundary_sentinel_prompt_sampled_and_padding():
    step = observed_from_artifact(artifact())
    a0 = step.rows[0]  # r-a trace 0: sampled [4,7) and [9,14), boundary + sentinel at 13
    classes = position_classes(a0, is_final_trace=False)
    assert classes[0] == ("prompt",)
    assert classes[2] == ("prompt", "image")
    assert classes[4] == ("sampled",)
    assert classes[13] == ("sampled", "boundary", "sentinel")
    pad = step.rows[3]
    assert set(position_classes(pad, True)) == {("padding",)}


def test_rollout_views_group_rows_by_logical_rollout_and_flag_findings():
    from compactsim.harness.audit import audit_run
    from tests.unit.audit.audit_builders import edit, expectation, run_of

    a = edit(artifact(order=(2, 1, 0)), "row_input_ids", (2, 5), 99)
    report = audit_run(expectation(1), run_of(a))
    views = rollout_views(observed_from_artifact(a), report.findings)
    assert [v.rollout_id for v in views] == ["r-a", "r-b", None]
    assert [r.physical_trace_id for r in views[0].rows] == ["r-a/trace-0", "r-a/trace-1"]
    assert views[0].rows[0].flagged_positions == (5,)
    assert views[0].rows[0].sentinel_positions == (13,)
    assert views[2].rows[0].spans[0].text == "<pad ×14>"


def test_html_page_is_self_contained_with_table_findings_plots_and_traces():
    page = format_report_html(suite())
    assert page.startswith("<!DOCTYPE html>")
    for fragment in ("<table class='suite'>", "audit-fixture", "class='fail'>FAIL", "<code>row.tokens</code>",
                     "reproduce: <code class='repro'>compactsim run audit-fixture --seed 7</code>",
                     "data:image/png;base64,", "class='tok sampled boundary sentinel'", "class='tok padding'",
                     "flagged at [5]", f"<img src='{png_data_url()}' alt='m1'>"):
        assert fragment in page, fragment
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_html_escapes_scenario_text():
    s = suite(broken=False)

    rec = replace(s.scenarios[0], purpose="<b>bold</b> & more")
    page = format_report_html(replace(s, scenarios=(rec,)), plots={})
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; more" in page
    assert "No findings" in page


def test_metric_plot_is_a_png_and_absent_without_metrics():
    png = format_metric_plot([{"token_mult_prob_error": 1.0, "loss": 0.5}, {"token_mult_prob_error": 1.0, "loss": 0.25}])
    assert png is not None and base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert format_metric_plot([{"something_else": 1.0}]) is None


def test_sections_collapse_failed_first_and_open():
    page = format_report_html(mixed_suite(), plots={})
    failing = page.index("<details class='scenario' id='scenario-failing-two-steps' open>")
    passing = page.index("<details class='scenario' id='scenario-passing-one-step'>")
    assert failing < passing  # run order was passing first
    assert page.count("<details class='scenario'") == 2
    assert page.count("<details class='traces' open>") == 1 and page.count("<details class='traces'>") == 1
    assert page.index("<a href='#scenario-passing-one-step'>") < page.index("<a href='#scenario-failing-two-steps'>")


def test_one_step_scenario_gets_a_value_table_not_a_plot():
    from compactsim.harness.report.html import default_plots, format_metrics

    s = mixed_suite()
    plots = default_plots(s)
    assert list(plots) == ["failing-two-steps"] and plots["failing-two-steps"] is not None
    one = s.scenarios[0]
    html = format_metrics(one, plot=None)
    assert html.startswith("<h3>Metrics (one step)</h3><table class='values'>")
    assert ("<tr><td class='key'>physical_trace_training/num_physical_rows</td><td class='num'>3</td></tr>" in html)
    assert "<img" not in html


def test_scripted_token_mult_prob_error_is_left_out_and_explained():
    from compactsim.harness.report.html import format_metrics
    from compactsim.harness.report.plots import metrics_for_mode

    assert metrics_for_mode("scripted")[:2] == ("loss", "grad_norm")
    assert metrics_for_mode("policy")[0] == metrics_for_mode(None)[0] == "token_mult_prob_error"
    metrics = {"token_mult_prob_error": 251.5, "loss": 0.5, "total_num_tokens": 36}
    scripted = replace(record(steps=1, mode="scripted"), step_metrics=(metrics,))
    html = format_metrics(scripted, plot=None)
    assert "<td class='key'>token_mult_prob_error</td>" not in html
    assert "<tr><td class='key'>loss</td><td class='num'>0.5</td></tr>" in html
    assert html.endswith("<p class='meta note'>token_mult_prob_error is not shown: in scripted mode the generation "
                         "logprobs come from the scenario script, not from the policy, so the trainer&#x27;s logprobs "
                         "cannot match them (≈ 1 is healthy only in policy mode, where both sides share the "
                         "weights).</p>")
    policy = format_metrics(replace(scripted, mode="policy"), plot=None)
    assert "<tr><td class='key'>token_mult_prob_error</td><td class='num'>251.5</td></tr>" in policy
    assert "note" not in policy
