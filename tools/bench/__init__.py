"""The benchmark suite: our figures beside nanobot's ``SessionManager`` doing the same work.

Run ``python -m sessionledger.tools.bench [--quick] [--only NAME]``. nanobot is imported only inside the
benchmarks; without it each figure is reported with "nanobot: not installed". Figures are
medians of several runs on a shared machine: compare the ratios, not the absolute numbers.
"""

from ._core import REGISTRY, Context, Row, benchmark, load_nanobot, machine
from ._main import main, run

__all__ = (
    "REGISTRY",
    "Context",
    "Row",
    "benchmark",
    "load_nanobot",
    "machine",
    "main",
    "run",
)
