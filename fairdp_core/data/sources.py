"""Finding, verifying and caching the raw dataset files.

Where a file comes from, in order:

1. ``<raw_dir>/<folder>/<file>`` (the project's own cache, ``data/raw`` by default);
2. a mirror directory (``data.mirror`` in params.yaml, or ``$FAIRDP_DATA_MIRROR``), copied into the cache;
3. a download from the canonical source, only when ``data.download`` is true.

Every file is checked against the sha256 its dataset module records (:class:`RawFile`, taken from the mirror's
``SOURCE.md`` files). A ``.gz`` file is also accepted when its *decompressed* bytes match the recorded content hash: that is
how a canonical uncompressed download (or LeCun's original MNIST ``.gz``) is verified against the same record.
A file that fails verification is never copied into the cache and never parsed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..atomic import atomic_path

__all__ = [
    "ChecksumError",
    "DataSourceError",
    "MissingDataError",
    "RawFile",
    "Sources",
    "sha256_file",
]


class DataSourceError(RuntimeError):
    """Base class for problems with raw dataset files."""


class MissingDataError(DataSourceError, FileNotFoundError):
    """No location held the file (the message lists every location tried)."""


class ChecksumError(DataSourceError):
    """A file was found but its bytes are not the recorded ones."""


@dataclass(frozen=True)
class RawFile:
    """One raw file of a dataset: where it lives in the mirror and how to fetch it canonically.

    ``sha256``/``nbytes``: the recorded file; ``content_sha256``: its decompressed bytes (``.gz`` files). ``urls``:
    canonical download locations. A URL ending in ``!a.zip!b.csv`` names members of (nested) zip archives.
    ``how_to_get``: what to tell a user when the file cannot be found or downloaded.
    """

    folder: str
    name: str
    sha256: str
    nbytes: int
    content_sha256: str | None = None
    urls: tuple[str, ...] = ()
    how_to_get: str = ""

    def record(self) -> dict[str, object]:
        """The recorded size and hashes, as ``{bytes, sha256, content_sha256}``."""
        return {"bytes": self.nbytes, "sha256": self.sha256, "content_sha256": self.content_sha256}


def sha256_file(path: str | os.PathLike, *, decompress: bool = False) -> str:
    """sha256 hex digest of a file's bytes (of its gunzipped bytes when ``decompress``)."""
    h = hashlib.sha256()
    opener = gzip.open if decompress else open
    with opener(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: Path, raw: RawFile) -> None:
    """Raise ChecksumError unless ``path`` holds the recorded bytes (or, for .gz, the recorded content)."""
    rec = raw.record()
    got = sha256_file(path)
    if got == rec["sha256"]:
        return
    if raw.name.endswith(".gz"):
        try:
            content = sha256_file(path, decompress=True)
        except (OSError, EOFError, gzip.BadGzipFile):
            content = None
        if content is not None and content == rec.get("content_sha256"):
            return
    raise ChecksumError(
        f"{path}: sha256 mismatch for {raw.folder}/{raw.name}\n"
        f"  expected sha256 {rec['sha256']} ({rec['bytes']} bytes"
        + (f"; decompressed content sha256 {rec['content_sha256']})" if rec.get("content_sha256") else ")")
        + f"\n  found    sha256 {got} ({path.stat().st_size} bytes)\n"
        "The file is truncated, altered or a different version; nothing was written downstream. "
        "Delete it and fetch it again."
    )


def _atomic_copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def _fetch_url(url: str, dst: Path, *, want_gz: bool, timeout: float = 60.0) -> None:
    """Download ``url`` (optionally ``url!member!member`` inside zips) to ``dst``, gzipped when ``want_gz``."""
    base, *members = url.split("!")
    with urllib.request.urlopen(base, timeout=timeout) as resp:
        payload = resp.read()
    for member in members:
        with zipfile.ZipFile(io.BytesIO(payload)) as zf:
            payload = zf.read(member)
    is_gz = payload[:2] == b"\x1f\x8b"
    if want_gz and not is_gz:
        payload = gzip.compress(payload, compresslevel=9, mtime=0)
    dst.write_bytes(payload)


@dataclass(frozen=True)
class Sources:
    """Where raw files are looked for. Built from the ``data`` section of params.yaml."""

    raw_dir: Path
    mirror: Path | None = None
    download: bool = False

    def fetch(self, raw: RawFile) -> Path:
        """Return a verified path in ``raw_dir`` for ``raw``, copying or downloading it there if needed."""
        cached = self.raw_dir / raw.folder / raw.name
        tried: list[str] = [f"{cached} (project cache)"]
        if cached.is_file():
            verify(cached, raw)
            return cached
        if self.mirror is not None:
            mirrored = self.mirror / raw.folder / raw.name
            tried.append(f"{mirrored} (mirror)")
            if mirrored.is_file():
                verify(mirrored, raw)
                _atomic_copy(mirrored, cached)
                return cached
        else:
            tried.append("(no mirror configured: data.mirror or $FAIRDP_DATA_MIRROR)")
        if self.download and raw.urls:
            errors = []
            for url in raw.urls:
                tried.append(f"{url} (download)")
                try:
                    with atomic_path(cached, suffix=".part") as tmp:
                        _fetch_url(url, tmp, want_gz=raw.name.endswith(".gz"))
                        verify(tmp, raw)  # a mismatch raises: the part file is removed, nothing is cached
                    return cached
                except (OSError, zipfile.BadZipFile) as e:  # network errors, HTTP errors, bad zip
                    errors.append(f"{url}: {e}")
            tried.extend(f"  failed: {e}" for e in errors)
        elif raw.urls:
            tried.append("(download disabled: set data.download: true in params.yaml to fetch " + ", ".join(raw.urls) + ")")
        else:
            tried.append("(no canonical download reproduces this file)")
        rec = raw.record()
        raise MissingDataError(
            f"raw file {raw.folder}/{raw.name} not found (expected sha256 {rec['sha256']}). Tried:\n  "
            + "\n  ".join(tried)
            + (f"\nHow to get it: {raw.how_to_get}" if raw.how_to_get else "")
        )
