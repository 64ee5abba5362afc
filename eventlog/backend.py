"""What the sibling packages need from a store's inside: log scans, view storage, catalog columns.

Applications use a store through :mod:`sessionledger.eventlog`. The catalog (projections),
replay and the tools work a level below: they scan logs (:class:`LogStat`), keep derived views
beside a log (:class:`ViewStorage`), read PostgreSQL's catalog columns (:class:`CatalogRecord`),
give a writer its bytes (:class:`SessionIO`) and map keys to file stems. Files are read and made
durable the store's one way (:func:`read_regular_file`: a whole file; :func:`read_range`: a
range of an open one; :func:`fsync_dir`). :func:`peek_snapshot` reads the anchor a stored
snapshot records without decoding its state. These names are public here, typed, and stable.
"""

from __future__ import annotations

from ._names import key_to_stem, stem_to_key
from ._pg_common import CatalogRecord
from ._safeio import fsync_dir, read_range, read_regular_file
from ._snapshot import peek_snapshot
from ._views import LogStat, ViewStorage
from ._writer import SessionIO, new_event_id

__all__ = (
    "CatalogRecord",
    "LogStat",
    "SessionIO",
    "ViewStorage",
    "fsync_dir",
    "key_to_stem",
    "new_event_id",
    "peek_snapshot",
    "read_range",
    "read_regular_file",
    "stem_to_key",
)
