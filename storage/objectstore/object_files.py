"""moto's S3 backend with every object kept as a file under a directory.

moto keeps object bodies in memory, so the embedded server used to lose every WAL object when
it stopped while the brokers kept the offsets that point into them. Here each object body is a
file written before the PUT is answered, and a restart loads the buckets and objects back, so
the embedded server keeps what it acknowledged across stop/start and kill -9.

Layout under the root::

    <bucket>/.bucket                  the bucket's region (the bucket exists while this does)
    <bucket>/<generation>-<key>       an object's body; <key> is the percent-encoded key
    <bucket>/<generation>-h<sha256>   the body of a key too long for a file name, with
    <bucket>/<generation>-h<sha256>.key   the key itself beside it

The generation grows with every write, so a PUT that overwrites a key writes a new file before
the old one is removed; after a crash between the two, the newest generation wins on restart.
Object metadata other than the body (user metadata, tags, versions) is not kept.

This hooks moto in two places, both of them what moto itself calls: the module's ``FakeKey``
class (whose value buffer becomes a file) and the backend's bucket creation and deletion.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import moto.s3.models as moto_s3
from moto.core import DEFAULT_ACCOUNT_ID

BUCKET_MARKER = ".bucket"
TEMPORARY_PREFIX = ".tmp-"
LONG_KEY_SUFFIX = ".key"
# File names are at most 255 bytes; a generation and a dash take 20 of them.
MAX_ENCODED_KEY = 200


@dataclass(frozen=True)
class StoredObject:
    key: str
    path: Path


class ObjectFiles:
    """The directory of buckets and object bodies; the only code that touches those files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._last_generation = 0

    def _generation(self) -> int:
        with self._lock:
            self._last_generation = max(self._last_generation + 1, time.time_ns())
            return self._last_generation

    def add_bucket(self, bucket: str, region: str) -> None:
        directory = self.root / bucket
        directory.mkdir(parents=True, exist_ok=True)
        self._write_atomically(directory / BUCKET_MARKER, region.encode())

    def remove_bucket(self, bucket: str) -> None:
        shutil.rmtree(self.root / bucket, ignore_errors=True)

    def write_object(self, bucket: str, key: str, body: bytes) -> Path:
        """Writes a new generation of `key` and returns its path; the old one stays until removed."""
        directory = self.root / bucket
        encoded = urllib.parse.quote(key, safe="")
        name = f"{self._generation()}-"
        if len(encoded) <= MAX_ENCODED_KEY:
            path = directory / (name + encoded)
        else:
            path = directory / (name + "h" + hashlib.sha256(key.encode()).hexdigest())
            self._write_atomically(path.with_name(path.name + LONG_KEY_SUFFIX), key.encode())
        self._write_atomically(path, body)
        return path

    @staticmethod
    def remove_object(path: Path) -> None:
        path.unlink(missing_ok=True)
        path.with_name(path.name + LONG_KEY_SUFFIX).unlink(missing_ok=True)

    def buckets(self) -> Iterator[tuple[str, str]]:
        """(name, region) of every bucket, in name order."""
        if not self.root.is_dir():
            return
        for directory in sorted(self.root.iterdir()):
            marker = directory / BUCKET_MARKER
            if marker.is_file():
                yield directory.name, marker.read_text()

    def objects(self, bucket: str) -> Iterator[StoredObject]:
        """The newest generation of every key; older generations and unfinished writes (a crash
        between writing a new generation and removing the old, or mid-write) are removed."""
        directory = self.root / bucket
        bodies: list[tuple[str, int, Path]] = []
        for path in directory.iterdir():
            if path.name.startswith(TEMPORARY_PREFIX):
                path.unlink(missing_ok=True)
            elif path.name[:1].isdigit() and not path.name.endswith(LONG_KEY_SUFFIX):
                generation, _, encoded = path.name.partition("-")
                bodies.append((self._key_of(path, encoded), int(generation), path))
        bodies.sort()
        for key, generations in itertools.groupby(bodies, key=lambda body: body[0]):
            *older, newest = generations
            for _, _, path in older:
                self.remove_object(path)
            yield StoredObject(key, newest[2])

    @staticmethod
    def _key_of(path: Path, encoded: str) -> str:
        if encoded.startswith("h") and len(encoded) == 65:
            return path.with_name(path.name + LONG_KEY_SUFFIX).read_text()
        return urllib.parse.unquote(encoded)

    def _write_atomically(self, path: Path, data: bytes) -> None:
        # A reader never sees half a body: write aside, flush to disk, then rename into place.
        temporary = path.with_name(f"{TEMPORARY_PREFIX}{threading.get_ident()}-{path.name}")
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)


# moto's own key class: the module's name for it is replaced by FileBackedKey below.
MotoKey = moto_s3.FakeKey


class FileBackedKey(MotoKey):
    """A moto key whose body is a file of `files` (keys of a bucket; multipart parts, which
    have no bucket, stay in memory until the upload completes into a key)."""

    files: ObjectFiles | None = None

    def __init__(self, *args: Any, adopt: Path | None = None, **kwargs: Any) -> None:
        # Read by the value setter, which FakeKey.__init__ calls.
        self._adopt = adopt
        self.path: Path | None = None
        self.owns_file = True
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def value(self) -> bytes:
        if self.path is None:
            return MotoKey.value.fget(self)  # type: ignore[attr-defined]
        return self.path.read_bytes()

    @value.setter
    def value(self, new_value: bytes) -> None:
        if self.files is None or self.bucket_name is None:
            MotoKey.value.fset(self, new_value)  # type: ignore[attr-defined]
        elif self._adopt is not None:
            self.path, self._adopt = self._adopt, None
            self.contentsize = self.path.stat().st_size
        else:
            self.path = self.files.write_object(self.bucket_name, self.name, bytes(new_value))
            self.contentsize = len(new_value)

    @property
    def etag(self) -> str:
        if self.path is not None and self._etag is None:
            digest = hashlib.md5(usedforsecurity=False)
            with open(self.path, "rb") as body:
                while block := body.read(1 << 20):
                    digest.update(block)
            self._etag = digest.hexdigest()
        return MotoKey.etag.fget(self)  # type: ignore[attr-defined]

    def dispose(self, garbage: bool = False) -> None:
        # moto disposes a key it deletes or replaces; garbage collection is not a delete.
        if not garbage and self.path is not None and self.owns_file:
            ObjectFiles.remove_object(self.path)
            self.path = None
        super().dispose(garbage)

    # moto deep-copies keys to list versions: a copy reads the original's file, never
    # writes or removes one.
    def __getstate__(self) -> dict[str, Any]:
        if self.path is None:
            return super().__getstate__()
        return {k: v for k, v in self.__dict__.items() if k not in ("_value_buffer", "lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("path") is None:
            super().__setstate__(state)
            return
        self.__dict__.update(state)
        self._value_buffer = tempfile.SpooledTemporaryFile(self._max_buffer_size)
        self.lock = threading.Lock()
        self.owns_file = False


def keep_objects_under(root: Path) -> None:
    """Makes this process's moto S3 keep its objects under `root` and loads what is there.

    moto's backends are per process, so one root per process: call it before serving."""
    if FileBackedKey.files is not None:
        if FileBackedKey.files.root != root:
            raise RuntimeError(f"this process already keeps its S3 objects under {FileBackedKey.files.root}")
        return
    root.mkdir(parents=True, exist_ok=True)
    files = ObjectFiles(root)
    FileBackedKey.files = files
    moto_s3.FakeKey = FileBackedKey  # type: ignore[misc]
    backend = moto_s3.s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    _record_bucket_changes(backend, files)
    for bucket_name, region in files.buckets():
        bucket = backend.create_bucket(bucket_name, region)
        for stored in files.objects(bucket_name):
            key = FileBackedKey(
                name=stored.key, value=b"", adopt=stored.path, bucket_name=bucket_name,
                account_id=DEFAULT_ACCOUNT_ID, region_name=region,
            )
            key.last_modified = datetime.datetime.fromtimestamp(
                stored.path.stat().st_mtime, datetime.timezone.utc).replace(tzinfo=None)
            bucket.keys.setlist(stored.key, [key])


def _record_bucket_changes(backend: Any, files: ObjectFiles) -> None:
    create_bucket, delete_bucket = backend.create_bucket, backend.delete_bucket

    def create(bucket_name: str, region_name: str, *args: Any, **kwargs: Any) -> Any:
        bucket = create_bucket(bucket_name, region_name, *args, **kwargs)
        files.add_bucket(bucket_name, region_name)
        return bucket

    def delete(bucket_name: str) -> Any:
        deleted = delete_bucket(bucket_name)
        if deleted is not None:
            files.remove_bucket(bucket_name)
        return deleted

    backend.create_bucket, backend.delete_bucket = create, delete
