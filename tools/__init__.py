"""Tools on top of the library: the ``sessionlog`` CLI, benchmarks, framework adapters."""

__all__: tuple[str, ...] = ()
