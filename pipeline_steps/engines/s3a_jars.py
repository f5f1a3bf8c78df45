"""Put Hadoop's S3 connector where the Spark engine finds it: ``python -m
pipeline_steps.engines.s3a_jars [folder]``.

The connector (``hadoop-aws``) and the AWS SDK bundle it was built against are Java archives
that no Python wheel of pyspark carries. The source distribution of ``sagemaker_pyspark`` on
the package index does; pip downloads it (through the machine's own index configuration) and
the two jars are extracted into ``<venv>/share/trainyard/spark-jars``. A folder holding them
already is left as it is.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from pipeline_steps.engines.spark_storage import JARS_DIR

SOURCE = "sagemaker_pyspark==1.4.5"
PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q")
JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")


def install(folder: Path = JARS_DIR) -> list[Path]:
    """The connector's jars in ``folder``, downloaded when any is missing."""
    wanted = [folder / name for name in JARS]
    if all(path.is_file() for path in wanted):
        return wanted
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trainyard-jars-") as tmp:
        subprocess.run(
            [*PIP_DOWNLOAD, "--dest", tmp, SOURCE],
            check=True,
        )
        (archive,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if name in JARS:
                    source = tar.extractfile(member)
                    assert source is not None
                    partial = folder / f".{name}.part"
                    partial.write_bytes(source.read())
                    partial.rename(folder / name)
    missing = [path.name for path in wanted if not path.is_file()]
    if missing:
        raise SystemExit(f"{SOURCE} holds no {', '.join(missing)}")
    return wanted


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else JARS_DIR
    for path in install(target):
        print(path)
