"""``python -m sessionledger.tools.peer agents|nanobot``: see the package docstring."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ._exceptions import EXCEPTIONS
from ._run import (
    PLUGINS,
    PeerError,
    agents_source,
    default_python,
    has_module,
    node_id,
    regressions,
    run,
    select,
)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; 0 when no test fails only with our adapter (named exceptions aside)."""
    parser = argparse.ArgumentParser(prog="python -m sessionledger.tools.peer")
    parser.add_argument("framework", choices=sorted(PLUGINS))
    parser.add_argument("--source", type=Path, help="the framework's source tree (with tests/)")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a new temp dir)")
    parser.add_argument("--python", default=default_python(), help="interpreter to run pytest")
    parser.add_argument("--all", action="store_true", help="every test file, not only session ones")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--test-timeout", type=float, default=60.0, help="seconds per test")
    parser.add_argument(
        "--no-recheck", action="store_true", help="do not run the failures again before reporting"
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sessionledger-peer-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.source is not None:
            source = args.source.resolve()
        elif args.framework == "agents":
            source = agents_source(workdir, args.python)
        else:
            raise PeerError("nanobot: pass --source <a checkout of nanobot at tag v0.2.2>")
        files = select(source, args.framework, args.all)
        extra = list(args.pytest_args)
        if has_module(args.python, "pytest_timeout"):
            extra.append(f"--timeout={args.test_timeout:.0f}")
        print(f"{args.framework}: {len(files)} test files in {source}; scratch {workdir}")
        common = {"python": args.python, "extra": extra, "timeout": args.timeout}
        theirs = run(source, files, workdir / "theirs.xml", plugin=None, **common)
        ours = run(source, files, workdir / "ours.xml", plugin=PLUGINS[args.framework], **common)
        failing = regressions(theirs, ours)
        nodes = [n for t in failing if (n := node_id(source, t)) is not None]
        if nodes and not args.no_recheck:
            # Once more, both ways, so a timing-dependent test is not blamed on the adapter.
            again = run(source, nodes, workdir / "theirs-2.xml", plugin=None, **common)
            mine = run(
                source, nodes, workdir / "ours-2.xml", plugin=PLUGINS[args.framework], **common
            )
            flaky = set(failing) - set(regressions(again, mine))
            if flaky:
                print(f"passed on a second run (timing, not the adapter): {len(flaky)}")
                for test in sorted(flaky):
                    print(f"  flaky {test}")
            failing = [t for t in failing if t not in flaky]
    except PeerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, outcomes in (("theirs", theirs), ("ours", ours)):
        print(
            f"{name:>6}: {outcomes.count('passed')} passed, {outcomes.count('failed')} failed, "
            f"{outcomes.count('skipped')} skipped"
        )
    known = {t: EXCEPTIONS[args.framework][t] for t in failing if t in EXCEPTIONS[args.framework]}
    unexpected = [t for t in failing if t not in known]
    print(f"fail only with ours: {len(failing)} ({len(known)} named exceptions)")
    for test in unexpected:
        print(f"  FAIL {test}")
    for test, why in known.items():
        print(f"  exception {test}: {why}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
