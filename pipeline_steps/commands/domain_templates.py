"""The files ``trainyard init-domain`` writes, as Jinja2 templates.

Each template renders one file of the new domain's folder from a ``DomainDraft``
(:mod:`pipeline_steps.commands.init_domain`): the domain module, the Feast repository (its
definitions and config) and the settings. Python values are written as literals (``py``), YAML
scalars as JSON (``tojson``), so any column name survives; ``wrap`` fills a paragraph of prose
(a docstring, or comments with their prefix).
"""

from __future__ import annotations

DOMAIN_MODULE = '''\
"""{{ d.domain_summary | wrap }}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

import pandas as pd
import pyarrow as pa
from pipeline_steps.core.domain import Domain, FeatureColumns, read_validated
from pipeline_steps.core.feature_views import EntitySpec, FeatureViewSpec, numeric_fields
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import FeatureSettings
from pipeline_steps.domain.event_times import event_times

DATASET = {{ d.name | py }}
SCHEMA = pa.schema(
    [
{%- for name, kind in d.schema_fields %}
        ({{ name | py }}, {{ kind }}),
{%- endfor %}
    ]
)
"""{{ d.schema_note | wrap }}"""
KEY = {{ d.roles.key | py }}
{%- if d.roles.key_columns %}
"""The key: the values of ``KEY_COLUMNS`` joined by ``|``."""
KEY_COLUMNS = {{ d.roles.key_columns | py }}
"""The columns that together name a row."""
{%- endif %}
TIME_COLUMN = {{ d.roles.time_column | py }}
CLOCK_COLUMN = {{ d.clock_column | py }}
"""The column of clock times (``HH:MM[:SS]``, or ``HHMM`` whole numbers) that, with the time
column's date, gives each row's event time; empty when the time column holds the time."""
DATE_FORMAT = {{ d.roles.date_format | py }}
"""How the time column writes a time (``ingest.date_format``): empty for ISO text and typed
columns, ``epoch_s``/``epoch_ms``, else a ``strptime`` format."""
TIME_ZONE = {{ d.roles.time_zone | py }}
"""The zone whose midnight starts a day (``ingest.time_zone`` must agree): empty for a time's
own zone, UTC for epochs."""
LABEL = {{ d.roles.label | py }}
{%- if d.task.counts_positives %}
POSITIVE = {{ d.roles.positive | py }}
"""The label value counted as 1 ({{ d.positive_reason }})."""
{%- elif d.task.has_classes %}
CLASSES = {{ d.roles.classes | py_lines }}
"""The label's values, in the order of their class indices
{{- ", lowest first" if d.task.ordered else "" }}: {{ d.roles.class_order }}."""
{%- endif %}
CATEGORICAL = {{ d.categorical | py_lines }}
"""Row features: strings with few distinct values."""
NUMERIC = {{ d.numeric | py_lines }}
"""Fields of the Feast feature view {{ d.view | py }} (``FEATURE_VIEW``), with the flags."""
INTEGER = {{ d.integer | py_lines }}
"""The numeric columns and flags holding whole numbers (Int64 in Feast)."""
LEFT_OUT = {{ d.left_out | py_lines }}
"""Columns the model does not see: identifiers, free text, columns always missing, encodings of
the time (a holdout's values would lie beyond every training value), sources of the label.
LEFT_OUT wins over the lists above: a column named here leaves the row features, the Feast
feature view and its offline source, with no other file to edit."""
{%- for name, why in d.decisions.items() %}
{{ (name ~ ": " ~ why) | wrap("# ") }}
{%- endfor %}
FLAGS = {{ d.flags | py_dict }}
"""Flag features of multi-valued text: flag -> (column, delimiter, value), 1 where the
column's row lists the value."""
CLOCKS = {{ d.clocks | py_dict }}
"""Hour-of-day features: feature -> the column of clock times (``HH:MM[:SS]``) it is read from."""
FEATURE_SOURCE = {{ d.view | py }}
"""The offline source of the feature view: ``$TRAINYARD_FEAST_DIR/sources/<name>.parquet``."""
ROW_FEATURES = [c for c in CATEGORICAL if c not in LEFT_OUT]
"""The features of the entity row itself: ``CATEGORICAL`` less ``LEFT_OUT``."""
{%- set kt = d.key_value_type | lower | py %}
FEATURE_VIEW = FeatureViewSpec(
    name={{ d.view | py }},
    entities=(EntitySpec(name=KEY, value_type={{ kt }}, description="The row's key."),),
    source=FEATURE_SOURCE,
    source_name={{ (d.name ~ "_rows") | py }},
    ttl=timedelta(0),  # a row's values hold until a newer row of the same key
    fields=numeric_fields([*NUMERIC, *FLAGS, *CLOCKS], INTEGER, LEFT_OUT),
    description="The numeric columns of each row, at its event time.",
)
"""The Feast feature view, built from the lists above: the features step applies it (and the
feature service over it) and writes its source with exactly its fields."""


def event_time(frame: pd.DataFrame) -> pd.Series:
    """Each row's event time in UTC (a date is its midnight), read by ``DATE_FORMAT``; with
    ``CLOCK_COLUMN``, its date's midnight plus the row's clock time."""
    values = frame[TIME_COLUMN]
    times = event_times(pa.array(values, from_pandas=True), DATE_FORMAT).to_pandas()
    times = pd.Series(
        pd.to_datetime(times, utc=True).astype("datetime64[us, UTC]").array,
        index=values.index,
    )
    if CLOCK_COLUMN:
        times = times + pd.to_timedelta(clock_minutes(frame[CLOCK_COLUMN]).fillna(0), unit="min")
    return times


def clock_minutes(values: pd.Series) -> pd.Series:
    """Minutes since midnight of each clock time (``11:38:36`` or ``1138``); missing where
    there is none."""
    if pd.api.types.is_numeric_dtype(values):
        whole = pd.to_numeric(values, errors="coerce")
        return (whole // 100) * 60 + whole % 100
    parts = values.astype("string").str.extract(r"^\\s*(\\d{1,2}):(\\d{2})(?::(\\d{2}))?")
    numbers = parts.apply(pd.to_numeric, errors="coerce")
    return numbers[0] * 60 + numbers[1] + numbers[2].fillna(0) / 60


def entity_key(frame: pd.DataFrame) -> pd.Series:
    """Each row's key{{ " (its key columns' values joined by |)" if d.roles.key_columns else "" }}.
    """
{%- if d.roles.key_columns %}
    parts = [frame[column].astype(str) for column in KEY_COLUMNS]
    return parts[0].str.cat(parts[1:], sep="|")
{%- else %}
    return frame[KEY]
{%- endif %}


def clock_hour(values: pd.Series) -> pd.Series:
    """The hour of each clock time (``11:38:36`` and ``1138`` are 11; ``2400`` is 0); missing
    where there is none."""
    if pd.api.types.is_numeric_dtype(values):
        return (pd.to_numeric(values, errors="coerce") // 100 % 24).astype("Int64")
    hours = values.astype("string").str.extract(r"^\\s*(\\d{1,2}):", expand=False)
    return pd.to_numeric(hours, errors="coerce").astype("Int64")


def flag(values: pd.Series, delimiter: str, value: str) -> pd.Series:
    """1 where a row's multi-valued text lists ``value``, else 0."""
    lists = values.fillna("").astype(str).str.split(delimiter, regex=False)
    return lists.map(lambda items: int(value in (item.strip() for item in items))).astype("Int64")


@dataclass(frozen=True, kw_only=True)
class {{ d.class_name }}(Domain):
    """{{ d.name }}: one entity row per {{ d.roles.key }}, its numeric columns joined by Feast."""

    def entity_rows(self, labelled: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """One row per key with its label; rows without a label are left out."""
        labelled = labelled[labelled[LABEL].notna()]
        rows = self._rows(labelled)
{%- if d.task.counts_positives %}
        rows[self.label] = (labelled[LABEL] == POSITIVE).astype("int8").to_numpy()
{%- elif d.task.has_classes %}
        names = labelled[LABEL]{{ ".astype('Int64')" if d.label_whole_floats else "" }}.astype(str)
        rows[self.label] = pd.Categorical(names, categories=CLASSES).codes.astype("int64")
{%- else %}
        rows[self.label] = labelled[LABEL].astype("float64").to_numpy()
{%- endif %}
        return rows.drop_duplicates(self.key).reset_index(drop=True)

    def request_rows(self, rows: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """One row per key to score: ``entity_rows`` without the label."""
        return self._rows(rows).drop_duplicates(self.key).reset_index(drop=True)

    def _rows(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The key, date, event time and row features of each row, in the order of ``frame``."""
        event = event_time(frame)
        local = event.dt.tz_convert(TIME_ZONE) if TIME_ZONE else event
        rows = pd.DataFrame(
            {
                self.key: entity_key(frame).to_numpy(),
                self.date_column: local.dt.strftime("%Y-%m-%d").to_numpy(),
                "event_timestamp": event.to_numpy(),
            }
        )
        for column in ROW_FEATURES:
            rows[column] = frame[column].to_numpy()
        return rows

    def feature_sources(
        self, lake: Lake, days: Sequence[date]
    ) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, str]]]:
        """The fields of ``FEATURE_VIEW`` of the window's validated rows, each at its row's event
        time."""
        rows, hashes = read_validated(lake, DATASET, days)
        source = pd.DataFrame(
            {KEY: entity_key(rows), "event_timestamp": event_time(rows)}
        )
        for field in FEATURE_VIEW.fields:
            if field.name in FLAGS:
                column, delimiter, value = FLAGS[field.name]
                source[field.name] = flag(rows[column], delimiter, value)
            elif field.name in CLOCKS:
                source[field.name] = clock_hour(rows[CLOCKS[field.name]])
            else:
                kind = "Int64" if field.dtype == "int64" else "float64"
                source[field.name] = rows[field.name].astype(kind)
        return {FEATURE_SOURCE: source}, {DATASET: hashes}


DOMAIN = {{ d.class_name }}(
    name=DATASET,
    datasets=(DATASET,),
    labelled_dataset=DATASET,
    schemas={DATASET: SCHEMA},
    feature_service={{ d.service | py }},
    feature_views=(FEATURE_VIEW,),
    key=KEY,
    date_column={{ d.date_column | py }},
    label=LABEL,
    task={{ d.roles.task | py }},
{%- if d.task.has_classes %}
    classes=CLASSES,
{%- endif %}
    row_features=FeatureColumns(categorical=ROW_FEATURES, numeric=[]),
    # slices are row features: a column moved out of them leaves the slices too
    slice_columns=tuple(c for c in {{ d.slice_columns | py }} if c in ROW_FEATURES),
    time_zone=TIME_ZONE,
)
'''

FEATURES_MODULE = '''\
"""{{ d.features_summary | wrap }}
"""

from __future__ import annotations

from {{ d.name }}.domain import DOMAIN

from pipeline_steps.core.domain import declared_definitions

# The entity, the feature view and the feature service, each under a name of its own for the
# feast CLI, which looks for Feast objects among a module's names.
globals().update({f"{type(o).__name__}_{o.name}": o for o in declared_definitions(DOMAIN) or []})
'''

FEATURE_STORE = """\
# Feast repository of the {{ d.name }} domain, drafted by trainyard init-domain. Paths come from
# the environment so that the same file serves the pipeline (which sets TRAINYARD_FEAST_DIR) and
# the feast CLI:
#   TRAINYARD_FEAST_DIR=/tmp/{{ d.name }}-feast feast -c feature_repo apply
project: {{ d.name }}
provider: local
registry: ${TRAINYARD_FEAST_DIR}/registry.db
online_store:
  type: sqlite
  path: ${TRAINYARD_FEAST_DIR}/online.db
offline_store:
  type: duckdb
entity_key_serialization_version: 3
"""

SETTINGS = """\
{{ d.settings_summary | wrap("# ") }}
#   export PYTHONPATH={{ d.folder }}${PYTHONPATH:+:$PYTHONPATH}
#   export TRAINYARD_CONFIG={{ d.folder }}/settings.yaml
domain:
  module: {{ (d.name ~ ".domain") | tojson }}
  # DAGs {{ d.name }}_training, _drift_monitor, _tuning and _serving; assets {{ d.name }}_drift and
  # {{ d.name }}_champion; experiments {{ d.name }}_training, _monitoring and _tuning; registered
  # model {{ d.name }}; its lake folder <lake.root>/{{ d.name }} (docs/teams.md).
  name: {{ d.name | tojson }}
  # team: your-team  # tags, Airflow pools and the Kueue queue of the team owning the domain
{{ d.empty_days_note | wrap("  # ") }}
  empty_days: {{ d.empty_days | tojson }}
ingest:
  source: file
{{ d.ingest_note | wrap("  # ") }}
  path: {{ d.ingest_path | tojson }}
  date_column: {{ d.roles.time_column | tojson }}
{%- if d.roles.date_format %}
  date_format: {{ d.roles.date_format | tojson }}
{%- endif %}
{%- if d.roles.time_zone %}
  time_zone: {{ d.roles.time_zone | tojson }}
{%- endif %}
{%- if d.row_key %}
  # rows without an id: each row's key is <file>:<row number>, the same on every re-ingest of
  # the same file; moving or renaming a file, or rows added above a row, change it
  row_key: {{ d.row_key | tojson }}
{%- endif %}
validation:
  expectations_dir: {{ (d.folder ~ "/expectations") | tojson }}
{{ d.row_count_note | wrap("  # ") }}
  row_count_low: {{ d.row_counts.low }}
  row_count_high: {{ d.row_counts.high }}
  row_count_noise: {{ d.row_counts.noise }}
  trailing_days: {{ d.row_counts.trailing_days }}
  # A column's missing share: its trailing days' share times null_share_factor, plus
  # null_share_floor; on a day of a few rows, what its rows miss by chance at that rate (as
  # rarely as share_noise standard deviations). Value sets allow rare values the same way.
  null_share_factor: {{ d.margins.null_factor }}
  null_share_floor: {{ d.margins.null_floor }}
  share_noise: {{ d.margins.null_noise }}
features:
  feature_repo: {{ (d.folder ~ "/feature_repo") | tojson }}
  project: {{ d.name | tojson }}
  window_days: {{ d.sizes.window_days }}
evaluate:
{{ d.sizes.holdout_note | wrap("  # ") }}
  holdout_days: {{ d.sizes.holdout_days }}
train:
{{ d.sizes.steps_note | wrap("  # ") }}
  min_steps_per_epoch: {{ d.sizes.min_steps_per_epoch }}
{%- if d.sizes.batch_size != d.default_batch_size %}
  batch_size: {{ d.sizes.batch_size }}
{%- endif %}
tuning:
  search_space: {{ (d.folder ~ "/tuning.yaml") | tojson }}
orchestration:
  start_date: {{ d.roles.first_day.isoformat() | tojson }}
"""

TUNING = """\
# Search space of {{ d.name }}_tuning (setting tuning.search_space), in the format of the
# shipped examples' tuning.yaml (docs/tuning.md): each key a train setting, drawn from a range
# or a set. Batch sizes around train.batch_size ({{ d.tuning_batch_sizes[1] }}).
parameters:
  learning_rate: {low: 3.0e-4, high: 3.0e-2, log: true, grid: [1.0e-3, 3.0e-3, 1.0e-2]}
  weight_decay: {low: 1.0e-6, high: 1.0e-2, log: true, grid: [1.0e-5, 1.0e-3]}
  batch_size: {choices: {{ d.tuning_batch_sizes | tojson }}}
  dropout: {low: 0.0, high: 0.4, grid: [0.0, 0.2]}
architectures:
  mlp:
    hidden_dims: {choices: [[64, 32], [128, 64], [256, 128]]}
    embedding_dim: {choices: [4, 8, 16]}
"""
