"""Feast is imported without typeguard's import-time instrumentation, and typeguard is left as
it was for everything else."""

import subprocess
import sys

PROBE = """
import typeguard
checked = typeguard.typechecked
from pipeline_steps.core.feast_import import import_feast
import_feast()
import feast.data_source as source
assert typeguard.typechecked is checked, "typechecked was not put back"
names = source.KafkaSource.__init__.__code__.co_names
print("instrumented" if "typeguard" in names else "plain")
"""


def test_feast_is_imported_as_python_O_imports_it() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "plain"
    # without the helper, the same class is instrumented: the probe can tell the difference
    plain = PROBE.replace("import_feast()", "import feast")
    done = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True)
    assert done.stdout.strip() == "instrumented", done.stderr[-2000:]
