"""The lake: the single storage helper every step goes through.

The root is a local folder or any fsspec URL. Writes are atomic: a file or a partition folder is
written under a temporary name and renamed into place, so a reader never sees half a partition.

Layout (``D`` is an ISO date)::

    raw/<dataset>/date=D/version=N/   data.parquet + _manifest.json (a new version per change)
    validated/<dataset>/date=D/       partitions that passed validation
    quarantine/<dataset>/date=D/      partitions that failed, with their report
    reports/validation/date=D/        Great Expectations result JSON
    features/runs/<run>/              each run's Feast offline sources, registry and online store
    training_sets/<run>/              frozen train + holdout parquet and their hashes
    runs/<run>/                       step manifests, checkpoints, evaluation, lineage
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import date, timedelta
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import RawPartition, load_record, to_json

MANIFEST = "_manifest.json"
CHUNK_ROWS = 65_536  # rows per row group and per hashed chunk
_DATE_DIR = re.compile(r"date=(\d{4}-\d{2}-\d{2})$")
_VERSION_DIR = re.compile(r"version=(\d+)$")


class Discard(Exception):
    """Raised inside ``Lake.staged_dir`` to drop the staged folder and leave the target as is."""


_PLAIN_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
_KEY_HASH = re.compile(r".*-h[0-9a-f]{16}")


def safe_run_key(run_id: str) -> str:
    """The run's folder name under ``runs/`` and ``training_sets/``.

    A plain id (letters, digits, ``._-``, not starting with a dot, at most 100 characters) is its
    own key. Any other id — Airflow's hold ``:`` and ``+``; ``.``, ``..``, slashes, unicode or a
    very long id — keeps a readable prefix and gains ``-h`` and 16 hex digits of its sha256, so
    the key never leaves its folder and two different ids never share one (plain ids ending in
    that pattern are hashed too).
    """
    if _PLAIN_RUN_ID.fullmatch(run_id) and not _KEY_HASH.fullmatch(run_id):
        return run_id
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).lstrip("._-")[:80].rstrip("._-")
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable or 'run'}-h{digest}"


class Lake:
    """Paths and atomic reads/writes under one storage root.

    ``pins`` (``ingest.pins``: ``"<dataset>/<date>"`` → raw version) makes it a pinned view for
    readers of validated data: only the pinned partitions exist, each as the pinned version.
    """

    def __init__(self, root: str, pins: Mapping[str, str] | None = None) -> None:
        self.root = root.rstrip("/")
        self.fs, self._base = fsspec.core.url_to_fs(self.root)
        self.pins = {key: int(version) for key, version in (pins or {}).items()}

    # -- layout -------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self._base, *[p.strip("/") for p in parts if p]])

    def url(self, *parts: str) -> str:
        """The path as a URL other libraries (Feast, MLflow) can open."""
        full = self.path(*parts)
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        return full if protocol in ("file", "local") else f"{protocol}://{full}"

    @staticmethod
    def partition(stage: str, dataset: str, day: date) -> str:
        return f"{stage}/{dataset}/date={day.isoformat()}"

    @staticmethod
    def raw_version(dataset: str, day: date, version: int) -> str:
        return f"raw/{dataset}/date={day.isoformat()}/version={version:04d}"

    def raw_versions(self, dataset: str, day: date) -> list[int]:
        """Complete versions of a raw partition, oldest first."""
        found = self._complete_subfolders(
            self.path(Lake.partition("raw", dataset, day)), _VERSION_DIR
        )
        return sorted(int(v) for v in found)

    def latest_raw(self, dataset: str, day: date) -> str:
        """Folder of the newest raw version of a partition; a clear error when there is none."""
        versions = self.raw_versions(dataset, day)
        if not versions:
            raise StepError(
                f"partition {self.path(Lake.partition('raw', dataset, day))} does not "
                "exist; run the ingest step first"
            )
        return Lake.raw_version(dataset, day, versions[-1])

    def previous_raw(self, dataset: str, day: date, version: int | None = None) -> str | None:
        """The raw version a new one is compared with: the one before ``version`` of the same
        date (any, when ``version`` is None), else the latest of the day before; None without
        either."""
        earlier = [v for v in self.raw_versions(dataset, day) if version is None or v < version]
        if earlier:
            return Lake.raw_version(dataset, day, earlier[-1])
        if before := self.raw_versions(dataset, day - timedelta(days=1)):
            return Lake.raw_version(dataset, day - timedelta(days=1), before[-1])
        return None

    def parquet_schema(self, folder: str) -> pa.Schema:
        """The Arrow schema of a partition folder's ``data.parquet`` (its footer only)."""
        with self.fs.open(self.path(folder, "data.parquet"), "rb") as fh:
            return pq.ParquetFile(fh).schema_arrow

    def pinned_version(self, dataset: str, day: date) -> int | None:
        """The raw version pinned for a partition, if the view pins it."""
        return self.pins.get(f"{dataset}/{day.isoformat()}")

    def validated_dates(self, dataset: str) -> list[date]:
        """Dates with a validated partition, oldest first; in a pinned view, the pinned dates."""
        if not self.pins:
            return self.partition_dates("validated", dataset)
        pinned = (key.partition("/") for key in self.pins)
        return sorted(date.fromisoformat(day) for name, _, day in pinned if name == dataset)

    def validated_partition(self, dataset: str, day: date) -> str | None:
        """The folder holding a day's validated rows, or None when there are none.

        Unpinned: ``validated/<dataset>/date=D`` if complete. Pinned: the validated copy when it
        holds the pinned version's content, else the pinned raw version itself (its content is
        what passed validation when the pins were recorded); a pinned version that is gone is an
        error naming it.
        """
        folder = Lake.partition("validated", dataset, day)
        if not self.pins:
            return folder if self.exists(folder, MANIFEST) else None
        version = self.pinned_version(dataset, day)
        if version is None:
            return None
        raw = Lake.raw_version(dataset, day, version)
        if not self.exists(raw, MANIFEST):
            raise StepError(
                f"pinned {dataset} {day} version {version}: {self.path(raw)} does not exist; "
                f"versions in the lake: {self.raw_versions(dataset, day)}"
            )
        wanted = self.partition_manifest(raw).sha256
        if self.exists(folder, MANIFEST) and self.partition_manifest(folder).sha256 == wanted:
            return folder
        return raw

    @staticmethod
    def run_dir(run_id: str) -> str:
        return f"runs/{safe_run_key(run_id)}"

    @staticmethod
    def training_set_dir(run_id: str) -> str:
        return f"training_sets/{safe_run_key(run_id)}"

    # -- reads --------------------------------------------------------------------------------
    def partition_manifest(self, folder: str) -> RawPartition:
        """The ``_manifest.json`` of a partition folder (raw version, validated, quarantine)."""
        return load_record(
            RawPartition, self.read_json(folder, MANIFEST), self.path(folder, MANIFEST)
        )

    def exists(self, *parts: str) -> bool:
        return bool(self.fs.exists(self.path(*parts)))

    def read_json(self, *parts: str) -> dict[str, Any]:
        with self.fs.open(self.path(*parts), "r") as fh:
            loaded: dict[str, Any] = json.load(fh)
        return loaded

    def read_table(self, *parts: str) -> pa.Table:
        return self.read_table_at(self.path(*parts))

    def read_table_at(self, path: str) -> pa.Table:
        """Read a parquet file by the full path a manifest recorded."""
        return pq.read_table(path, filesystem=self.fs)

    def partition_dates(self, stage: str, dataset: str) -> list[date]:
        """Dates of the complete partitions (those with a manifest) of one stage, oldest first."""
        found = self._complete_subfolders(self.path(stage, dataset), _DATE_DIR)
        return sorted(date.fromisoformat(d) for d in found)

    def _complete_subfolders(self, folder: str, pattern: re.Pattern[str]) -> list[str]:
        """The first group of ``pattern`` for each subfolder that matches and holds a manifest."""
        if not self.fs.exists(folder):
            return []
        found = []
        for entry in self.fs.ls(folder, detail=False):
            match = pattern.search(entry.rstrip("/"))
            if match and self.fs.exists(f"{entry.rstrip('/')}/{MANIFEST}"):
                found.append(match.group(1))
        return found

    # -- atomic writes ------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        """Whether the root is a local (or mounted) folder rather than an object store."""
        return "file" in self.fs.protocol or "local" in self.fs.protocol

    def write_bytes(self, data: bytes, *parts: str) -> str:
        """Write a file atomically (temp file + rename; one PUT on an object store, which is
        atomic there) and return its path."""
        target = self.path(*parts)
        if not self.is_local:
            self.fs.pipe_file(target, data)
            return target
        self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex}"
        with self.fs.open(tmp, "wb") as fh:
            fh.write(data)
        self.fs.mv(tmp, target)
        return target

    def write_json(self, payload: dict[str, Any], *parts: str) -> str:
        """Write JSON atomically and return its path."""
        return self.write_bytes(_json_bytes(payload), *parts)

    def write_table(self, table: pa.Table, *parts: str) -> str:
        """Write one parquet file atomically and return its path."""
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        return self.write_bytes(sink.getvalue().to_pybytes(), *parts)

    def dump_json(self, payload: dict[str, Any], path: str) -> None:
        """Write JSON to a full path inside a ``staged_dir`` (which makes it atomic)."""
        with self.fs.open(path, "wb") as fh:
            fh.write(_json_bytes(payload))

    @contextmanager
    def staged_dir(self, *parts: str) -> Iterator[str]:
        """Yield a temporary folder: on success it replaces ``parts`` whole; on error (or
        ``Discard``) it is gone and ``parts`` is untouched.

        An object store has no folder rename: there the folder's ``_manifest.json``, which
        readers take as the mark of a complete folder, goes first when an old folder is
        replaced and comes last when the new one is moved in."""
        target = self.path(*parts)
        parent = target.rsplit("/", 1)[0]
        created = self.is_local and not self.fs.exists(parent)
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
        self.fs.makedirs(tmp, exist_ok=True)
        try:
            yield tmp
        except Discard:
            self._remove(tmp, parent if created else None)
            return
        except BaseException:
            self._remove(tmp, parent if created else None)
            raise
        if not self.is_local:
            self._move_objects(tmp, target)
            return
        old = f"{parent}/.old-{uuid.uuid4().hex}"
        had_old = self.fs.exists(target)
        if had_old:
            self.fs.mv(target, old, recursive=True)
        self.fs.mv(tmp, target, recursive=True)
        if had_old:
            self.fs.rm(old, recursive=True)

    def _remove(self, folder: str, parent: str | None = None) -> None:
        """Remove ``folder``, and ``parent`` too when that is left empty (a staged folder that
        came to nothing leaves no empty partition behind, such as a day without rows)."""
        if self.fs.exists(folder):
            self.fs.rm(folder, recursive=True)
        if parent is not None:
            with suppress(OSError):  # not empty: another writer's folder is there
                self.fs.rmdir(parent)

    def _move_objects(self, tmp: str, target: str) -> None:
        """Replace the objects under ``target`` by those under ``tmp``, manifest last."""
        if self.fs.exists(f"{target}/{MANIFEST}"):
            self.fs.rm_file(f"{target}/{MANIFEST}")
        self._remove(target)
        staged = sorted(self.fs.find(tmp), key=lambda key: key.endswith(f"/{MANIFEST}"))
        for key in staged:
            self.fs.mv(key, target + key[len(tmp) :])
        self.fs.invalidate_cache()

    @contextmanager
    def writer_lock(self, *parts: str) -> Iterator[None]:
        """Hold an exclusive lock on the partition ``parts`` while writing it, so two runs of the
        same day (the monitor's and the training's, a manual run beside a backfill) take turns:
        the second sees the first's version and finds its content cached. The lock is a
        ``flock`` on ``.<name>.lock`` beside the folder on a local (or network-mounted) lake;
        object stores have no lock (serialise those runs with an Airflow pool)."""
        if not self.is_local:
            yield
            return
        import fcntl

        target = self.path(*parts)
        parent, _, name = target.rpartition("/")
        self.fs.makedirs(parent, exist_ok=True)
        with open(f"{parent}/.{name}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def write_parquet(
        self, table: pa.Table, folder: str, name: str, row_group_rows: int = CHUNK_ROWS
    ) -> str:
        path = f"{folder}/{name}"
        pq.write_table(table, path, filesystem=self.fs, row_group_size=row_group_rows)
        return path

    def publish(
        self,
        raw: str,
        stage: str,
        dataset: str,
        day: date,
        report: str,
        drop: Sequence[str] = (),
    ) -> None:
        """Copy a raw partition version to ``validated/`` or ``quarantine/`` atomically, its
        manifest pointing at the validation report (kept beside it in quarantine). ``drop``
        names columns left out of the copy (its manifest keeps the raw version's sha256, the
        identity of what was validated, and the copy's own schema fingerprint)."""
        folder = Lake.partition(stage, dataset, day)
        with self.writer_lock(folder), self.staged_dir(folder) as tmp:
            published = replace(self.partition_manifest(raw), validation_report=report)
            if drop:
                schema = self._copy_without(
                    self.path(raw, "data.parquet"), f"{tmp}/data.parquet", drop
                )
                published = replace(published, schema_fingerprint=schema_fingerprint(schema))
            else:
                self.fs.copy(self.path(raw, "data.parquet"), f"{tmp}/data.parquet")
            self.dump_json(to_json(published), f"{tmp}/{MANIFEST}")
            if stage == "quarantine":
                self.fs.copy(report, f"{tmp}/validation.json")

    def _copy_without(self, source: str, target: str, drop: Sequence[str]) -> pa.Schema:
        """Stream a parquet file into ``target`` without the ``drop`` columns; its schema."""
        with self.fs.open(source, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            columns = [c for c in parquet.schema_arrow.names if c not in drop]
            schema = pa.schema([parquet.schema_arrow.field(c) for c in columns])
            with pq.ParquetWriter(target, schema, filesystem=self.fs) as writer:
                for batch in parquet.iter_batches(columns=columns, batch_size=CHUNK_ROWS):
                    writer.write_batch(batch)
        return schema

    def remove(self, *parts: str) -> None:
        target = self.path(*parts)
        if self.fs.exists(target):
            self.fs.rm(target, recursive=True)


def _json_bytes(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, indent=2, sort_keys=True, default=str).encode()


class Rechunker:
    """Re-cuts a stream of record batches into tables of exactly ``rows`` rows (the last one
    shorter), holding at most one table plus one incoming batch."""

    def __init__(self, schema: pa.Schema, rows: int) -> None:
        self.schema, self.rows = schema, rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def push(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        """The full tables ``batch`` completes."""
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        while self._pending_rows >= self.rows:
            yield self._take(self.rows)

    def finish(self) -> Iterator[pa.Table]:
        """The rows left, as one shorter table (none when nothing is left)."""
        if self._pending_rows:
            yield self._take(self._pending_rows)

    def _take(self, rows: int) -> pa.Table:
        table = pa.Table.from_batches(self._pending, self.schema)
        chunk, rest = table.slice(0, rows).combine_chunks(), table.slice(rows)
        self._pending, self._pending_rows = rest.to_batches(), rest.num_rows
        return chunk


class PartitionWriter:
    """Streams record batches into one parquet file, hashing the content as it goes.

    The hash takes ``CHUNK_ROWS``-row chunks, so the sha256 depends on the rows alone, not on how
    a source happened to batch them, and equals ``table_sha256`` of the whole table. Row groups
    hold ``row_group_rows`` rows (default ``CHUNK_ROWS``). Memory holds at most one chunk, one
    row group and one incoming batch.
    """

    def __init__(
        self, lake: Lake, path: str, schema: pa.Schema, row_group_rows: int = CHUNK_ROWS
    ) -> None:
        self.schema = schema.remove_metadata()
        self.rows = 0
        self._digest = hashlib.sha256(schema_fingerprint(self.schema).encode())
        self._writer = pq.ParquetWriter(path, self.schema, filesystem=lake.fs)
        self._groups = Rechunker(self.schema, row_group_rows)
        self._chunks = Rechunker(self.schema, CHUNK_ROWS)

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.schema.remove_metadata().equals(self.schema):
            raise ValueError(f"batch schema {batch.schema} differs from {self.schema}")
        batch = batch.replace_schema_metadata(None)
        for group in self._groups.push(batch):
            self._write(group)
        for chunk in self._chunks.push(batch):
            _hash_chunk(self._digest, chunk)

    def close(self) -> str:
        """Finish the file; return the content sha256."""
        for group in self._groups.finish():
            self._write(group)
        chunks = list(self._chunks.finish())
        if self.rows == 0:  # an empty file still has its one (empty) row group and chunk
            self._writer.write_table(self.schema.empty_table())
            chunks = [self.schema.empty_table()]
        for chunk in chunks:
            _hash_chunk(self._digest, chunk)
        self._writer.close()
        return self._digest.hexdigest()

    def _write(self, group: pa.Table) -> None:
        self._writer.write_table(group, row_group_size=group.num_rows)
        self.rows += group.num_rows


def _hash_chunk(digest: Any, chunk: pa.Table) -> None:
    """Feed the chunk's Arrow IPC stream into ``digest`` as it is written (never held whole)."""
    with pa.ipc.new_stream(pa.PythonFile(_DigestSink(digest), mode="w"), chunk.schema) as writer:
        writer.write_table(chunk)


class _DigestSink:
    """A write-only file object that hashes what is written to it."""

    closed = False

    def __init__(self, digest: Any) -> None:
        self.digest = digest

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return len(data)

    def flush(self) -> None:
        pass


def table_sha256(table: pa.Table) -> str:
    """sha256 of a table's content (schema + rows), as ``PartitionWriter`` computes it."""
    table = table.replace_schema_metadata(None)
    digest = hashlib.sha256(schema_fingerprint(table.schema).encode())
    for start in range(0, max(table.num_rows, 1), CHUNK_ROWS):
        _hash_chunk(digest, table.slice(start, CHUNK_ROWS).combine_chunks())
    return digest.hexdigest()


def schema_fingerprint(schema: pa.Schema) -> str:
    """Short stable hash of column names and types, in order."""
    text = ";".join(f"{f.name}:{f.type}" for f in schema)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
