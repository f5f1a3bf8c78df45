"""The evaluation report: the plots of the challenger against the champion (and, for curves,
the baselines), the metrics with their intervals, the slice table and the gate's verdict, as one
self-contained HTML file (plots embedded) beside the plots as PNG files.

The task names its plots (``Task.plots``), drawn here by name, mostly scikit-learn's displays:
ROC, precision-recall and calibration curves on shared axes (``binary``: ``RocCurveDisplay``,
``PrecisionRecallDisplay``, ``CalibrationDisplay``), the confusion matrix normalised over each
true class (``multiclass``, ``ordinal``: ``ConfusionMatrixDisplay`` of the task's predicted
class), the distribution of the class error, predicted minus true class (``ordinal``),
residuals and predicted against actual values (``regression``: ``PredictionErrorDisplay``).
The page is a Jinja2 template.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline_steps.core.manifests import EvaluateManifest, HoldoutMetrics
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.gate import NAMES, Verdict
from pipeline_steps.evaluation.metrics import CALIBRATION_BINS
from pipeline_steps.tasks import Task, TaskError

CURVES = ("roc", "precision_recall", "calibration")
"""Plots of the probability of 1, drawn for every model (the baselines too)."""
SCATTERS = ("residuals", "predicted_vs_actual")
"""Plots of values against the label, for the models of ``SCATTERED``."""
TITLES = {
    "roc": "ROC",
    "precision_recall": "Precision-recall",
    "calibration": "Calibration",
    "confusion": "Confusion matrix (share of each true class)",
    "residuals": "Residuals",
    "predicted_vs_actual": "Predicted against actual",
    "class_error": "Class error (predicted - true class)",
}
SCATTERED = {"challenger": "tab:blue", "champion": "tab:orange"}
"""Models drawn in the confusion matrices and scatter plots, with their colours (the baselines
only in curves)."""
SCATTER_ROWS = 1000
"""Rows drawn in a scatter plot (a seeded sample of the holdout)."""
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
<p>Logical date {{ day }}; {{ task }} task; holdout {{ holdout.rows }} rows
{%- if spec.counts_positives %} ({{ holdout.positives }} positive){% endif %}
{%- if spec.real_valued %} (mean label {{ "%.4f" % label_mean }}){% endif %}
from {{ holdout.days | join(", ") }}; sha256 <code>{{ holdout.sha256[:16] }}</code>.
Challenger: <code>{{ challenger_uri }}</code>; champion:
{% if champion_version %}version {{ champion_version }}{% else %}none yet{% endif %}.</p>
<h2>Gate: <span class="{{ verdict.outcome }}">{{ verdict.outcome }}</span></h2>
<ul class="reasons">{% for reason in verdict.reasons %}<li>{{ reason }}</li>{% endfor %}</ul>
<p class="muted">Intervals: paired{% if spec.stratified %}, stratified{% endif %} bootstrap
({{ resamples }} resamples); each bound is
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
{% if recall %}<h2>Recall per class</h2>
<table><tr><th>model</th>{% for c in classes %}<th>{{ c }}</th>{% endfor %}</tr>
{% for name, row in recall.items() %}<tr><td>{{ name }}</td>
{% for c in classes %}<td>{{ "%.4f" % row.get(c, nan) }}</td>{% endfor %}</tr>{% endfor %}
</table>{% endif %}
<h2>{{ "Curves" if curves_only else "Plots" }}</h2>
<div class="plots">{% for name, data in plots.items() %}
<img alt="{{ name }}" src="data:image/png;base64,{{ data }}">{% endfor %}</div>
<h2>Slices</h2>
{% if spec.counts_positives %}
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
{% else %}<table><tr><th>slice</th><th>rows</th><th>challenger {{ names[slice_metric] }}</th>
<th>champion {{ names[slice_metric] }}</th>
<th>{{ names[slice_metric] }} challenger - champion [interval]</th></tr>
{% for s in slices %}<tr><td>{{ s.column }} = {{ s.value }}</td><td>{{ s.rows }}</td>
<td>{{ "%.4f" % s.challenger[slice_metric] }}</td>
<td>{% if s.champion %}{{ "%.4f" % s.champion[slice_metric] }}{% endif %}</td>
<td>{% if s.differences[slice_metric] %}{{ s.differences[slice_metric].describe() }}{% else %}
<span class="muted">{% if s.champion %}below gate.min_slice_rows{% endif %}</span>{% endif %}
</td></tr>{% endfor %}
</table>{% endif %}
</body></html>
"""


def _binary(ax: Any, plot: str, labels: np.ndarray, curves: Mapping[str, np.ndarray]) -> None:
    from sklearn.calibration import CalibrationDisplay
    from sklearn.metrics import PrecisionRecallDisplay, RocCurveDisplay

    for name, probabilities in curves.items():
        if plot == "roc":
            RocCurveDisplay.from_predictions(labels, probabilities, name=name, ax=ax)
        elif plot == "precision_recall":
            PrecisionRecallDisplay.from_predictions(labels, probabilities, name=name, ax=ax)
        else:
            CalibrationDisplay.from_predictions(
                labels, probabilities, n_bins=CALIBRATION_BINS, name=name, ax=ax
            )
    ax.legend(loc="lower right" if plot != "precision_recall" else "upper right", fontsize=8)


def _regression(ax: Any, plot: str, labels: np.ndarray, curves: Mapping[str, np.ndarray]) -> None:
    from sklearn.metrics import PredictionErrorDisplay

    kind = "residual_vs_predicted" if plot == "residuals" else "actual_vs_predicted"
    for name, colour in SCATTERED.items():
        if name in curves:
            PredictionErrorDisplay.from_predictions(
                labels,
                curves[name],
                kind=kind,
                subsample=SCATTER_ROWS,
                random_state=0,
                ax=ax,
                scatter_kwargs={"alpha": 0.4, "s": 8, "label": name, "color": colour},
            )
    ax.legend(loc="best", fontsize=8)


def _confusion(
    labels: np.ndarray,
    curves: Mapping[str, np.ndarray],
    classes: Sequence[str],
    path: Path,
    spec: Task,
) -> None:
    """One confusion matrix per model of ``SCATTERED`` side by side, rows normalised."""
    import matplotlib.pyplot as plt
    from sklearn.metrics import ConfusionMatrixDisplay

    models = [name for name in SCATTERED if name in curves]
    side = 1.6 + 0.45 * len(classes)
    figure, axes = plt.subplots(
        1, len(models), figsize=(side * len(models), side), dpi=110, squeeze=False
    )
    for ax, name in zip(axes[0], models, strict=True):
        ConfusionMatrixDisplay.from_predictions(
            labels,
            spec.predicted_class(curves[name]),
            labels=list(range(len(classes))),
            display_labels=list(classes),
            normalize="true",
            values_format=".2f",
            colorbar=False,
            xticks_rotation="vertical",
            ax=ax,
        )
        ax.set_title(name, fontsize=9)
    figure.suptitle(TITLES["confusion"], fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _class_error(
    ax: Any, labels: np.ndarray, curves: Mapping[str, np.ndarray], classes: int, spec: Task
) -> None:
    """The share of rows at each class error (predicted minus true class index) for the
    models of ``SCATTERED``, side by side: a good ordinal model's mass sits at 0 and its
    misses at -1 and +1."""
    errors = np.arange(-(classes - 1), classes)
    width = 0.8 / len(SCATTERED)
    y = np.asarray(labels, dtype=np.int64)
    for offset, (name, colour) in enumerate(SCATTERED.items()):
        if name not in curves:
            continue
        error = spec.predicted_class(curves[name]) - y
        counts = np.array([(error == e).sum() for e in errors], dtype=np.float64)
        shares = counts / max(len(y), 1)
        ax.bar(errors + (offset - 0.5) * width, shares, width, label=name, color=colour)
    ax.set_xticks(errors)
    ax.set_xlabel("predicted - true class")
    ax.set_ylabel("share of rows")
    ax.legend(loc="upper right", fontsize=8)


def _plots(
    task: str,
    labels: np.ndarray,
    curves: Mapping[str, np.ndarray],
    folder: Path,
    classes: Sequence[str] = (),
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = task_spec(task)
    written = []
    for plot in spec.plots:
        path = folder / f"{plot}.png"
        if plot == "confusion":
            _confusion(labels, curves, classes, path, spec)
        else:
            figure, ax = plt.subplots(figsize=(5.2, 4.6), dpi=110)
            if plot in SCATTERS:
                _regression(ax, plot, labels, curves)
            elif plot in CURVES:
                _binary(ax, plot, labels, curves)
            elif plot == "class_error":
                _class_error(ax, labels, curves, len(classes), spec)
            else:
                plt.close(figure)
                raise TaskError(
                    f"the {task} task asks for a report plot {plot!r}; known: {', '.join(TITLES)}"
                )
            ax.set_title(TITLES[plot])
            figure.tight_layout()
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
    classes: Sequence[str] = (),
) -> list[Path]:
    """Write ``index.html`` and the task's plots into ``folder``; returns the files written.

    ``curves`` maps a model's name to its holdout predictions (challenger first): probabilities
    of 1 (``binary``), class probabilities ([rows, K], ``multiclass`` and ``ordinal``,
    ``classes`` their names) or values (``regression``); the task is the challenger's metrics'.
    ``TaskError`` when the task names a plot this module does not draw."""
    import jinja2

    task = evaluation.challenger.metrics.task
    spec = task_spec(task)
    plots = _plots(task, np.asarray(labels), curves, folder, classes)
    metrics = spec.metrics
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
        task=task,
        spec=spec,
        curves_only=all(plot in CURVES for plot in spec.plots),
        holdout=evaluation.holdout,
        label_mean=evaluation.challenger.metrics.label_mean,
        challenger_uri=evaluation.challenger.model_uri,
        champion_version=evaluation.champion.version if evaluation.champion else None,
        verdict=verdict,
        resamples=evaluation.resamples,
        confidence=evaluation.confidence,
        metrics=metrics,
        names={**NAMES, "ece": "calibration error"},
        models={name: {m: getattr(row, m) for m in metrics} for name, row in models.items()},
        comparisons=comparisons,
        classes=list(classes) or list(evaluation.challenger.metrics.class_recall),
        recall={name: row.class_recall for name, row in models.items() if row.class_recall},
        nan=float("nan"),
        plots={p.stem: base64.b64encode(p.read_bytes()).decode() for p in plots},
        slices=evaluation.slices,
        slice_metric=spec.slice_metric,
    )
    report = folder / REPORT
    report.write_text(html, encoding="utf-8")
    return [report, *plots]
