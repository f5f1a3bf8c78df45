"""The evaluation report: ROC, precision-recall and calibration curves of the challenger against
the champion and the baselines, the metrics with their intervals, the slice table and the gate's
verdict, as one self-contained HTML file (plots embedded) beside the plots as PNG files.

The curves are scikit-learn's displays (``RocCurveDisplay``, ``PrecisionRecallDisplay``,
``CalibrationDisplay``) drawn on shared axes; the page is a Jinja2 template.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pipeline_steps.core.manifests import EvaluateManifest, HoldoutMetrics
from pipeline_steps.evaluation.gate import NAMES, Verdict
from pipeline_steps.evaluation.metrics import CALIBRATION_BINS

PLOTS = ("roc", "precision_recall", "calibration")
TITLES = {"roc": "ROC", "precision_recall": "Precision-recall", "calibration": "Calibration"}
REPORT = "index.html"

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Evaluation {{ run_id }} ({{ day }})</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222 }
h1 { font-size: 1.5em } h2 { font-size: 1.15em; margin-top: 2em }
table { border-collapse: collapse; margin: .5em 0 } td, th { padding: .25em .7em;
border-bottom: 1px solid #ddd; text-align: right } th:first-child, td:first-child
{ text-align: left } .pass { color: #176b2c } .refuse { color: #a31515 } .undecided
{ color: #8a5a00 } .plots img { width: 32%; min-width: 300px } .muted { color: #777 }
ul.reasons li { margin: .2em 0 }
</style></head><body>
<h1>Evaluation of run {{ run_id }}</h1>
<p>Logical date {{ day }}; holdout {{ holdout.rows }} rows ({{ holdout.positives }} positive)
from {{ holdout.days | join(", ") }}; sha256 <code>{{ holdout.sha256[:16] }}</code>.
Challenger: <code>{{ challenger_uri }}</code>; champion:
{% if champion_version %}version {{ champion_version }}{% else %}none yet{% endif %}.</p>
<h2>Gate: <span class="{{ verdict.outcome }}">{{ verdict.outcome }}</span></h2>
<ul class="reasons">{% for reason in verdict.reasons %}<li>{{ reason }}</li>{% endfor %}</ul>
<p class="muted">Intervals: paired, stratified bootstrap ({{ resamples }} resamples); each bound is
one-sided at {{ "%.0f" % (confidence * 100) }}% (the interval two-sided at
{{ "%.0f" % ((2 * confidence - 1) * 100) }}%). Promotion also needs the champion to be unchanged
since evaluation; the promote step records the final decision.</p>
<h2>Holdout metrics</h2>
<table><tr><th>model</th>{% for m in metrics %}<th>{{ names[m] }}</th>{% endfor %}</tr>
{% for name, row in models.items() %}<tr><td>{{ name }}</td>
{% for m in metrics %}<td>{{ "%.4f" % row[m] }}</td>{% endfor %}</tr>{% endfor %}</table>
{% for title, diffs in comparisons.items() %}
<h2>{{ title }}</h2>
<table><tr><th>metric</th><th>difference</th><th>interval</th></tr>
{% for m, d in diffs.items() %}<tr><td>{{ names[m] }}</td><td>{{ "%+.4f" % d.estimate }}</td>
<td>[{{ "%+.4f" % d.low }}, {{ "%+.4f" % d.high }}]</td></tr>{% endfor %}</table>
{% endfor %}
<h2>Curves</h2>
<div class="plots">{% for name, data in plots.items() %}
<img alt="{{ name }}" src="data:image/png;base64,{{ data }}">{% endfor %}</div>
<h2>Slices</h2>
<table><tr><th>slice</th><th>rows</th><th>positives</th><th>challenger AUC</th>
<th>champion AUC</th><th>AUC difference [interval]</th><th>challenger log loss</th>
<th>champion log loss</th></tr>
{% for s in slices %}<tr><td>{{ s.column }} = {{ s.value }}</td><td>{{ s.rows }}</td>
<td>{{ s.positives }}</td><td>{{ "%.4f" % s.challenger.auc }}</td>
<td>{% if s.champion %}{{ "%.4f" % s.champion.auc }}{% endif %}</td>
<td>{% if s.differences.auc %}{{ s.differences.auc.describe() }}{% else %}<span class="muted">
{% if s.champion %}below gate.min_slice_rows or one class{% endif %}</span>{% endif %}</td>
<td>{{ "%.4f" % s.challenger.log_loss }}</td>
<td>{% if s.champion %}{{ "%.4f" % s.champion.log_loss }}{% endif %}</td></tr>{% endfor %}
</table>
</body></html>
"""


def _plots(labels: np.ndarray, curves: Mapping[str, np.ndarray], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.calibration import CalibrationDisplay
    from sklearn.metrics import PrecisionRecallDisplay, RocCurveDisplay

    written = []
    for plot in PLOTS:
        figure, ax = plt.subplots(figsize=(5.2, 4.6), dpi=110)
        for name, probabilities in curves.items():
            if plot == "roc":
                RocCurveDisplay.from_predictions(labels, probabilities, name=name, ax=ax)
            elif plot == "precision_recall":
                PrecisionRecallDisplay.from_predictions(labels, probabilities, name=name, ax=ax)
            else:
                CalibrationDisplay.from_predictions(
                    labels, probabilities, n_bins=CALIBRATION_BINS, name=name, ax=ax
                )
        ax.set_title(
            {"roc": "ROC", "precision_recall": "Precision-recall"}.get(plot, "Calibration")
        )
        ax.legend(loc="lower right" if plot != "precision_recall" else "upper right", fontsize=8)
        figure.tight_layout()
        path = folder / f"{plot}.png"
        figure.savefig(path)
        plt.close(figure)
        written.append(path)
    return written


def render(
    evaluation: EvaluateManifest,
    run_id: str,
    labels: np.ndarray,
    curves: Mapping[str, np.ndarray],
    verdict: Verdict,
    folder: Path,
) -> list[Path]:
    """Write ``index.html`` and the plots into ``folder``; returns the files written.

    ``curves`` maps a model's name to its holdout probabilities (challenger first)."""
    import jinja2

    plots = _plots(np.asarray(labels), curves, folder)
    metrics = ("auc", "log_loss", "brier", "accuracy", "ece")
    models: dict[str, HoldoutMetrics] = {"challenger": evaluation.challenger.metrics}
    comparisons = {}
    if evaluation.champion is not None:
        models[f"champion (version {evaluation.champion.version})"] = evaluation.champion.metrics
        comparisons["Challenger - champion"] = evaluation.differences
    for baseline in evaluation.baselines:
        models[baseline.name.replace("_", " ")] = baseline.metrics
        comparisons[f"Challenger - {baseline.name.replace('_', ' ')}"] = baseline.differences
    page = jinja2.Environment(autoescape=True).from_string(TEMPLATE)
    html = page.render(
        run_id=run_id,
        day=evaluation.logical_date,
        holdout=evaluation.holdout,
        challenger_uri=evaluation.challenger.model_uri,
        champion_version=evaluation.champion.version if evaluation.champion else None,
        verdict=verdict,
        resamples=evaluation.resamples,
        confidence=evaluation.confidence,
        metrics=metrics,
        names={**NAMES, "ece": "calibration error"},
        models={name: {m: getattr(row, m) for m in metrics} for name, row in models.items()},
        comparisons=comparisons,
        plots={p.stem: base64.b64encode(p.read_bytes()).decode() for p in plots},
        slices=evaluation.slices,
    )
    report = folder / REPORT
    report.write_text(html, encoding="utf-8")
    return [report, *plots]
