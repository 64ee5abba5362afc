"""Tools on top of the library: the ``sessionledger`` CLI, benchmarks, framework adapters."""

__all__: tuple[str, ...] = ()
