"""Soak runs of the reliability scenarios: ``python -m sessionledger.tools.soak [--kills N] [--seconds S] ...``.

Each scenario module holds one scenario, run by the CI tests (tests/reliability) with small
counts and by ``python -m sessionledger.tools.soak`` many more times: crash (SIGKILLed writers), faults
(ENOSPC/EIO at write and fsync, short writes), fuzz (hostile log and import bytes), tamper
(edited logs caught by verify) and load (processes, threads and tasks at once). A scenario that
sees a guarantee broken raises :class:`ClaimFailed`; otherwise it returns its figures.
"""

from ._checks import ClaimFailed
from ._crash import CrashFigures, run_crashes
from ._faults import FaultFigures, run_faults
from ._fuzz import FuzzFigures, run_fuzz
from ._load import LoadFigures, run_load
from ._tamper import TamperFigures, run_tamper

__all__ = (
    "ClaimFailed",
    "CrashFigures",
    "FaultFigures",
    "FuzzFigures",
    "LoadFigures",
    "TamperFigures",
    "run_crashes",
    "run_faults",
    "run_fuzz",
    "run_load",
    "run_tamper",
)
