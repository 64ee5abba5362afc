"""The read side: LLM history, session catalog, snapshots and stats, all derived from the log."""

__all__: tuple[str, ...] = ()
