"""Replay: crash recovery, verify and repair, time travel, audit timeline, import/export, follow."""

__all__: tuple[str, ...] = ()
