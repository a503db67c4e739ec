"""Where the CLI's rich tables print: piped or logged (CI, a device call's log), rich fits 80 columns and cuts the
cells it must keep whole ("torch.c…", "1_Square_matrix_…"); a terminal keeps its own width."""

from __future__ import annotations

import sys

from rich.console import Console


def table_console(keep: int) -> Console:
    """A console on stdout for a table whose unwrapped columns need ``keep`` characters in all: the terminal's own
    width when stdout is one, else at least ``keep`` (and 80)."""
    return Console(width=None if sys.stdout.isatty() else max(80, keep))
