"""What a backend implements, and what the sibling packages need from a store's inside.

Applications use a store through :mod:`sessionledger.eventlog`. A new store backend subclasses
:class:`Backend` (six abstract operations: open a log under its lock, read it, describe where it
lives, quarantine cut bytes, list keys, remove; an open gives a :class:`RawSession`) and hands
it to :class:`BaseStore`; everything else (opening and folding, catching up with other writers,
the lifecycle, snapshots) is written once above it. Optional parts: a :class:`TrashBin` (retention), snapshot bytes, and a
:class:`CatalogSource` (how the catalog scans the logs; :class:`KeyScan` works for any backend).
A log written by several store objects at once gives its writers a :class:`SharedIO`.
:func:`catalog_source` gives a store's catalog source (the catalog's way in; applications never
need it, so it is not on the store).

The catalog (projections), replay and the tools work a level below the application API: they
scan logs (:class:`LogStat`), read PostgreSQL's catalog columns (:class:`CatalogRecord`), give a
writer its bytes (:class:`SessionIO`), map keys to file stems and read a key's structure
(:func:`split_key`), and say where a log lives (:func:`log_location`). Files are read and made
durable the store's one way (:func:`read_regular_file`: a whole file; :func:`read_range`: a
range of an open one; :func:`write_temp_beside`: a new file's bytes, durable, before it is
put in place; :func:`fsync_dir`). :func:`peek_snapshot` reads the anchor a stored
snapshot records without decoding its state. These names are public here, typed, and stable.
"""

from __future__ import annotations

import typing

from ._backend import (
    Backend,
    CatalogSource,
    CatchUp,
    KeyScan,
    LogStat,
    SharedIO,
    TrashBin,
    catalog_source,
)
from ._names import key_to_stem, split_key, stem_to_key
from ._pg_common import CatalogRecord
from ._safeio import fsync_dir, read_range, read_regular_file, write_temp_beside
from ._snapshot import peek_snapshot
from ._store_types import RawSession
from ._writer import SessionIO, new_event_id

if typing.TYPE_CHECKING:
    from ._store import BaseStore

__all__ = (
    "Backend",
    "CatalogRecord",
    "CatalogSource",
    "CatchUp",
    "KeyScan",
    "LogStat",
    "RawSession",
    "SessionIO",
    "SharedIO",
    "TrashBin",
    "catalog_source",
    "fsync_dir",
    "key_to_stem",
    "log_location",
    "new_event_id",
    "peek_snapshot",
    "read_range",
    "read_regular_file",
    "split_key",
    "stem_to_key",
    "write_temp_beside",
)


def log_location(store: BaseStore, key: str) -> str:
    """Where ``key``'s log lives, as the store's own errors name it (a file's path, a session
    in a database, ``memory:<key>``)."""
    return store._describe(key)
