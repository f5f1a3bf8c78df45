"""The training benchmark measures the train loop's own step functions: its smallest
measurements run here on a few batches, so a change to the train step that breaks the benchmark
fails a test instead of the next benchmark run."""

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT

BENCHMARK = ROOT / "benchmarks" / "training.py"


@pytest.fixture(scope="module")
def benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("training_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def training_set(benchmark: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,048 rows of the benchmark's training set: four batches."""
    path = tmp_path_factory.mktemp("benchmark") / "train.parquet"
    benchmark.write_set(2048, path)
    return path


def test_the_benchmark_set_has_the_domains_feature_columns(benchmark: ModuleType) -> None:
    categorical, numeric, label = benchmark.feature_columns()
    assert {"carrier", "origin", "dest", "plane_type"} <= set(categorical)
    assert {"distance", "temp", "seats"} <= set(numeric)
    assert label == "delayed"


def test_the_step_benchmark_runs_the_loops_step(benchmark: ModuleType, training_set: Path) -> None:
    rates = benchmark.bench_step(training_set, 2, "mlp")
    assert rates.keys() == {"ours", "raw", "raw_fused"}
    assert all(rate > 0 for rate in rates.values())


def test_the_checkpoint_benchmark_saves_and_loads_a_training_state(
    benchmark: ModuleType, training_set: Path
) -> None:
    measured = benchmark.bench_checkpoint(training_set, "mlp")
    assert measured["size_kib"] > 0 and measured["parameters"] > 0


def test_the_benchmark_command_describes_its_options() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--rows" in done.stdout and "--device" in done.stdout
