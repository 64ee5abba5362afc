"""Keeping the nanobot-format views of one workspace (see :mod:`._views` for the format)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sessionledger import projections
from sessionledger.eventlog import EventLogError, FileStore, SessionState

from . import _compat, _views
from ._import import Ledger, delete_session_file
from ._listing import metadata_record, view_row
from ._session import local_time

if TYPE_CHECKING:
    from ._session import Binding, Session

logger = logging.getLogger("sessionledger.tools.nanobot")

#: The metadata key under which a caller-set ``updated_at`` is kept in the log.
UPDATED_AT_KEY = "_nanobot_updated_at"


def caller_updated_at(metadata: dict[str, Any], state: SessionState) -> str:
    """The ``updated_at`` nanobot would report: the caller's, when one was saved."""
    value = metadata.get(UPDATED_AT_KEY)
    return value if isinstance(value, str) else local_time(state.updated_at).isoformat()


class ViewKeeper:
    """The views of one workspace's sessions: where they are, whose they are, keeping them."""

    def __init__(self, sessions_dir: Path, store: FileStore, ledger: Ledger) -> None:
        self.sessions_dir = sessions_dir
        self.store = store
        self.ledger = ledger

    def path(self, key: str) -> Path:
        """Where nanobot looks for ``key``: ``sessions/<nanobot stem>.jsonl``."""
        return self.sessions_dir / f"{_compat.nanobot_stem(key)}.jsonl"

    def _mine(self, key: str, path: Path) -> bool:
        """Whether this manager may write ``key``'s view at ``path``."""
        head = _views.read_header(path)
        if head is None:
            if not path.exists():
                return True
            if path.is_symlink() or not path.is_file():
                return False
            # An empty file is a view cut short by a crash; a nanobot file already imported is
            # replaced by its view. Anything else unreadable is not ours to overwrite.
            return path.stat().st_size == 0 or path.name in self.ledger.imported()
        owner = head.get("key")
        if owner == key:
            return _views.mark_of(head) is not None or path.name in self.ledger.imported()
        if _views.mark_of(head) is None:
            return False  # a nanobot file of another key
        return not (isinstance(owner, str) and self.store.exists(owner))

    def after_save(
        self,
        session: Session,
        binding: Binding,
        seq_before: int,
        appended: list[dict[str, Any]] | None,
    ) -> None:
        """Bring ``session``'s view up to the log (``appended``: None unless only appended)."""
        if binding.view_blocked:
            return
        seq = binding.writer.seq
        head = _views.header(
            session.key,
            session.created_at.isoformat(),
            session.updated_at.isoformat(),
            session.metadata,
            binding.writer.state.last_consolidated,
            seq,
        )
        view = binding.view
        try:
            live = len(binding.writer.state.messages)
            fits = (
                view is not None
                and appended is not None
                and view.seq == seq_before
                and view.count + len(appended) == live  # no other writer's messages between
            )
            if fits and _views.append(view, head, appended or []):
                return
            path = self.path(session.key)
            if view is None and not self._mine(session.key, path):
                binding.view_blocked = True
                logger.warning(
                    "No nanobot view for %s: %s belongs to another key", session.key, path
                )
                return
            binding.view = _views.rewrite(path, head, binding.writer.state.message_dicts)
        except OSError as exc:
            binding.view = None
            logger.warning("Could not write the nanobot view of %s: %s", session.key, exc)

    def rebuild(self, key: str, state: SessionState) -> None:
        """Write ``key``'s view from its folded state (when this manager may)."""
        path = self.path(key)
        if not self._mine(key, path):
            return
        metadata = dict(state.metadata)
        updated = caller_updated_at(metadata, state)
        metadata.pop(UPDATED_AT_KEY, None)
        head = _views.header(
            key,
            local_time(state.created_at).isoformat(),
            updated,
            metadata,
            state.last_consolidated,
            state.seq,
        )
        try:
            _views.rewrite(path, head, state.message_dicts)
        except OSError as exc:
            logger.warning("Could not write the nanobot view of %s: %s", key, exc)

    def reconcile(self) -> int:
        """Rebuild every view that does not show its log's seq; return how many were rebuilt."""
        rebuilt = 0
        for info in projections.list_sessions(self.store):
            key = info.key
            if _views.mark_of(_views.read_header(self.path(key))) == info.seq:
                continue
            try:
                state = self.store.load(key, prefix=True).state
            except EventLogError as exc:
                logger.warning("Cannot rebuild the nanobot view of %s: %s", key, exc)
                continue
            self.rebuild(key, state)
            rebuilt += 1
        return rebuilt

    def remove(self, key: str) -> bool:
        """Remove ``key``'s view (or imported nanobot file); True if one was removed."""
        path = self.path(key)
        head = _views.read_header(path)
        if head is None or head.get("key") != key:
            return False
        return delete_session_file(path)

    def rows(self) -> dict[str, dict[str, Any]]:
        """nanobot's ``list_sessions`` rows of every view, by key."""
        rows: dict[str, dict[str, Any]] = {}
        for path in self.sessions_dir.glob("*.jsonl"):
            row = view_row(path)
            if row is not None and self.path(row["key"]) == path:
                rows[row["key"]] = row
        return rows

    def metadata(self, key: str) -> dict[str, Any] | None:
        """``read_session_metadata`` from the view's first line, or None without a current view."""
        head = _views.read_header(self.path(key))
        if head is None or head.get("key") != key or _views.mark_of(head) is None:
            return None
        record = metadata_record(head, key)
        record["metadata"] = {k: v for k, v in record["metadata"].items() if k != UPDATED_AT_KEY}
        return record
