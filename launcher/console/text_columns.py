"""Plain-text tables for people (``miles-launch --dry-run``, ``status``): columns sized to their content."""

from __future__ import annotations

from collections.abc import Sequence

GAP = "  "


def aligned(rows: Sequence[Sequence[str]], *, indent: str = "") -> list[str]:
    """One line per row: every column but the last padded to its widest cell, columns ``GAP`` apart, no trailing
    spaces. The last column is free text (never padded), so a long value there does not widen the table."""
    count = max((len(row) for row in rows), default=0)
    widths = [max((len(row[i]) for row in rows if i < len(row) - 1), default=0) for i in range(count)]
    lines = []
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + list(row[-1:])
        lines.append((indent + GAP.join(cells)).rstrip())
    return lines
