"""Rendering benchmark rows: a rich table for the terminal and a Markdown table for the docs.

Invariants: rendering is pure (rows and machine facts in, a renderable or text out); the ratio
column always says how many times better ours is, whatever the unit (rates: ours / nanobot;
times: nanobot / ours), so ratios from different machines compare directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.markup import escape
from rich.table import Table

from ._core import Row


def fmt(value: float | None, unit: str) -> str:
    """A figure with its unit, rounded for reading."""
    if value is None:
        return "-"
    if unit == "ms":
        if value < 1:
            return f"{value:.3f} ms"
        if value < 100:
            return f"{value:.1f} ms"
        return f"{value:,.0f} ms"
    if unit == "MB/s":
        return f"{value:,.0f} MB/s"
    if value < 100:
        return f"{value:.1f}/s"
    return f"{value:,.0f}/s"


def fmt_target(row: Row) -> str:
    """The target as a bound (">= 100,000/s", "<= 60 ms")."""
    if row.target is None:
        return ""
    sign = ">=" if row.higher_is_better else "<="
    return f"{sign} {fmt(row.target, row.unit)}"


def fmt_ratio(row: Row) -> str:
    """``12.3x`` (ours better), ``0.8x`` (ours worse), or a dash."""
    ratio = row.ratio
    if ratio is None:
        return "-"
    return f"{ratio:,.1f}x" if ratio < 100 else f"{ratio:,.0f}x"


def fmt_meets(row: Row) -> str:
    """Whether the target is met: "yes", "NO", or blank."""
    meets = row.meets
    return "" if meets is None else ("yes" if meets else "NO")


def _nanobot_cell(row: Row, missing: str) -> str:
    if row.nanobot is not None:
        rival = "" if row.rival == "nanobot" else f" ({row.rival})"
        return fmt(row.nanobot, row.unit) + rival
    if row.rival != "nanobot":
        return "-"
    return f"nanobot: {missing}" if missing and row.nanobot_what else "-"


def table(rows: Iterable[Row], *, title: str, nanobot_missing: str = "") -> Table:
    """A rich table: ours, nanobot 0.2.2's, the ratio (x better), the target and whether it is met."""
    t = Table(title=title, title_justify="left", show_lines=False)
    t.add_column("benchmark", overflow="fold", ratio=1)
    t.add_column("ours", justify="right", no_wrap=True)
    t.add_column("nanobot / rival", justify="right", no_wrap=True)
    t.add_column("ratio", justify="right", no_wrap=True)
    t.add_column("target", justify="right", no_wrap=True)
    t.add_column("met", justify="center", no_wrap=True)
    for row in rows:
        met = fmt_meets(row)
        style = "red" if met == "NO" else None
        what = escape(row.what)
        if row.note:
            what += f" [dim]({escape(row.note)})[/dim]"
        if row.nanobot_what:
            what += f"\n[dim]{escape(row.rival)}: {escape(row.nanobot_what)}[/dim]"
        t.add_row(
            what,
            fmt(row.ours, row.unit) if row.ours is not None else "n/a",
            _nanobot_cell(row, nanobot_missing),
            fmt_ratio(row),
            fmt_target(row),
            met,
            style=style,
        )
    return t


def markdown(rows: Iterable[Row], *, nanobot_missing: str = "") -> str:
    """The same table as GitHub Markdown."""
    lines = [
        "| benchmark | ours | nanobot 0.2.2 (or as named) | ours vs it | target | met | it did |",
        "|---|---:|---:|---:|---:|:---:|---|",
    ]
    for row in rows:
        what = row.what + (f" ({row.note})" if row.note else "")
        cells = (
            what.replace("|", "\\|"),
            fmt(row.ours, row.unit) if row.ours is not None else "n/a",
            _nanobot_cell(row, nanobot_missing),
            fmt_ratio(row),
            fmt_target(row),
            fmt_meets(row),
            row.nanobot_what,
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_line(facts: Mapping[str, str]) -> str:
    """One line saying when and where the figures were taken."""
    return (
        f"{facts['date']}; {facts['cores']} cores, {facts['cpu']}; Python {facts['python']}; "
        f"{facts['system']}; load average {facts.get('load', '?')} (1/5/15 min)"
    )
