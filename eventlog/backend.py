"""What the sibling packages need from a store's inside: log scans, view storage, catalog columns.

Applications use a store through :mod:`sessionledger.eventlog`. The catalog (projections),
replay and the tools work a level below: they scan logs (:class:`LogStat`), keep derived views
beside a log (:class:`ViewStorage`), read PostgreSQL's catalog columns (:class:`CatalogRecord`),
give a writer its bytes (:class:`SessionIO`), map keys to file stems, and read a whole file or
make a rename durable the store's safe way (:func:`read_regular_file`, :func:`fsync_dir`). These
names are public here, typed, and kept stable for them; :func:`peek_snapshot` reads the
anchor a stored snapshot records without decoding its state.
"""

from __future__ import annotations

from ._names import key_to_stem, stem_to_key
from ._pg_common import CatalogRecord
from ._safeio import fsync_dir, read_regular_file
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
    "read_regular_file",
    "stem_to_key",
)
