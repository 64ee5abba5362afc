"""``python -m sessionledger.tools.soak``: run every reliability scenario many times and print the figures.

Defaults are the soak sizes (5,000 kills, 2,000 faults, 20,000 fuzzed inputs of each kind, a
60 s load run, exhaustive tampering of keyed and unkeyed samples, 300 restore/cleanup races of
four processes with planted trash entries, 1,000 rounds of hostile files, values, full disks and
forged keyed logs); ``--only`` picks scenarios.
Exit status 1 (and the broken claim on stderr) when a guarantee failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from sessionledger.eventlog import DURABILITIES

from ._checks import ClaimFailed
from ._crash import run_crashes
from ._faults import run_faults
from ._fuzz import run_fuzz
from ._hostile import run_hostile
from ._load import run_load
from ._tamper import run_tamper
from ._trashrace import run_trash_race

SCENARIOS = ("crash", "faults", "fuzz", "tamper", "load", "trash", "hostile")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sessionledger.tools.soak", description=__doc__.splitlines()[0]
    )
    p.add_argument("--kills", type=int, default=5000, help="SIGKILLs, split over the modes")
    p.add_argument("--modes", default=",".join(DURABILITIES), help="durability modes to crash")
    p.add_argument("--hash-key", default=None, help="key the crash stores' chains with this")
    p.add_argument("--faults", type=int, default=2000, help="I/O faults to inject")
    p.add_argument("--fuzz", type=int, default=20000, help="mutated logs (and as many imports)")
    p.add_argument("--tamper-seeds", type=int, default=3, help="sample logs to tamper with")
    p.add_argument("--byte-step", type=int, default=1, help="tamper with every n-th byte")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the load run")
    p.add_argument("--processes", type=int, default=4, help="worker processes under load")
    p.add_argument("--trash-rounds", type=int, default=300, help="restore/cleanup races")
    p.add_argument("--hostile-rounds", type=int, default=1000, help="hostile file/value rounds")
    p.add_argument("--threads", type=int, default=6, help="threads or tasks per worker")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    p.add_argument("--root", type=Path, default=None, help="work here (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p


class _Figures(dict[str, Any]):
    """Figures by scenario; with ``echo``, each is printed (and flushed) as it is recorded."""

    def __init__(self, echo: bool) -> None:
        super().__init__()
        self.echo = echo

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        if self.echo:
            print(f"{name}: {json.dumps(value)}", flush=True)


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Run the chosen scenarios in ``root``; return their figures (raises ClaimFailed)."""
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}")
    out = _Figures(echo=not args.json)
    if "crash" in only:
        modes = [m for m in args.modes.split(",") if m]
        share, extra = divmod(args.kills, len(modes))
        out["crash"] = [
            dataclasses.asdict(
                run_crashes(
                    root / f"crash-{m}",
                    m,
                    share + (i < extra),
                    seed=args.seed,
                    hash_key=args.hash_key,
                )
            )
            for i, m in enumerate(modes)
        ]
    if "faults" in only:
        out["faults"] = dataclasses.asdict(run_faults(root / "faults", args.faults, seed=args.seed))
    if "fuzz" in only:
        fuzz = run_fuzz(args.fuzz, seed=args.seed)
        out["fuzz"] = {**dataclasses.asdict(fuzz), "inputs": fuzz.inputs}
    if "tamper" in only:
        tampered = []
        for n in range(args.tamper_seeds):
            for key in (None, "soak-secret"):
                figures = run_tamper(
                    root / f"tamper-{n}-{key is not None}",
                    seed=args.seed + n,
                    events=10 + 4 * n,
                    hash_key=key,
                    byte_step=args.byte_step,
                )
                tampered.append({**dataclasses.asdict(figures), "total": figures.total})
        out["tamper"] = tampered
    if "trash" in only:
        out["trash"] = dataclasses.asdict(
            run_trash_race(root / "trash", args.trash_rounds, seed=args.seed)
        )
    if "hostile" in only:
        out["hostile"] = dataclasses.asdict(
            run_hostile(root / "hostile", args.hostile_rounds, seed=args.seed)
        )
    if "load" in only:
        out["load"] = dataclasses.asdict(
            run_load(
                root / "load",
                args.seconds,
                processes=args.processes,
                threads=args.threads,
                seed=args.seed,
            )
        )
    return out


def summary(figures: dict[str, Any]) -> dict[str, int]:
    """The headline numbers: kills survived, faults injected, inputs fuzzed, events lost."""
    crash = figures.get("crash", [])
    return {
        "kills_survived": sum(c["kills"] for c in crash),
        "acknowledged_events_checked": sum(c["acknowledged"] for c in crash)
        + figures.get("load", {}).get("acknowledged", 0),
        "faults_injected": figures.get("faults", {}).get("injected", 0),
        "inputs_fuzzed": figures.get("fuzz", {}).get("inputs", 0),
        "tampered_logs_caught": sum(t["total"] for t in figures.get("tamper", [])),
        "load_events": figures.get("load", {}).get("events_in_logs", 0),
        "trash_races": figures.get("trash", {}).get("rounds", 0),
        "conversations_checked": figures.get("trash", {}).get("conversations_checked", 0),
        "hostile_operations": figures.get("hostile", {}).get("operations", 0),
        "values_tried": figures.get("hostile", {}).get("values_tried", 0),
        "events_lost": 0,  # any loss raises ClaimFailed before we get here
    }


def main(argv: list[str] | None = None) -> int:
    """Run the soak; print the figures; 0 when every claim held."""
    args = _parser().parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="soak-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        figures = run(args, root)
    except ClaimFailed as exc:
        print(f"CLAIM FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    result = {"summary": summary(figures), **figures}
    if args.json:
        print(json.dumps(result))
    else:
        print(
            "summary: "
            + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in result["summary"].items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
