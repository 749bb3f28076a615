"""``miles-launch --dry-run`` prints its tables (hosts, pools, placement) with columns sized to their content: a long
pool id (a pool expander's ``{id}-router``), worker id or host name keeps every row's columns in line
(launcher/console/cli.py ``_describe``, launcher/config/placement.py ``describe``, launcher/console/text_columns.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from launch_helpers import local_host, write_hosts_toml
from test_cli import COUNTER, cli

from launcher.console.text_columns import aligned

pytestmark = pytest.mark.processes

LONG_POOL = "inference-router-of-the-rollout"  # longer than any fixed width the table had
LONG_HOST = "a-rather-long-host-name-0"


def section(stdout: str, title: str) -> list[str]:
    """The rows of one ``title:`` section (indented two spaces; a pool's ``command:`` lines left out)."""
    lines = stdout.splitlines()
    start = lines.index(f"{title}:") + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        if not line.startswith("    command: "):
            rows.append(line)
    return rows


def column_starts(row: str, columns: int) -> list[int]:
    """Where the first ``columns`` whitespace-separated words of ``row`` begin."""
    return [match.start() for match in re.finditer(r"\S+", row)][:columns]


@pytest.fixture
def dry_run(tmp_path: Path) -> str:
    hosts = [local_host("n0", tmp_path / "n0", gpus=2), local_host(LONG_HOST, tmp_path / "n1", gpus=2)]
    pools = [{"id": "w", "cells": 2, "strategy": "SPREAD", "worker": COUNTER}, {"id": LONG_POOL, "worker": COUNTER}]
    result = cli(str(write_hosts_toml(tmp_path, hosts, pools)), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "run").exists()  # nothing started
    return result.stdout


@pytest.mark.parametrize(("title", "columns", "rows"), [("hosts", 4, 2), ("pools", 2, 2), ("placement", 5, 4)])
def test_a_long_pool_id_and_host_name_keep_every_column_in_line(
    dry_run: str, title: str, columns: int, rows: int
) -> None:
    table = section(dry_run, title)
    assert len(table) == rows, dry_run
    starts = [column_starts(row, columns) for row in table]
    assert all(len(s) == columns for s in starts), dry_run
    assert all(s == starts[0] for s in starts), f"{title}: columns start at {starts}\n{dry_run}"
    assert LONG_POOL in dry_run and LONG_HOST in dry_run


def test_the_placement_lists_the_long_ids_in_full(dry_run: str) -> None:
    placed = [row.split()[:2] for row in section(dry_run, "placement")]
    assert placed == [["worker", "host"], ["w-0-0", "n0"], ["w-1-0", LONG_HOST], [f"{LONG_POOL}-0-0", "n0"]]


def test_columns_are_as_wide_as_their_widest_cell_and_the_last_one_is_free_text() -> None:
    rows = [("a", "bb", "free text"), ("cccc", "d", "x"), ("e", "", "")]
    assert aligned(rows, indent="  ") == ["  a     bb  free text", "  cccc  d   x", "  e"]
