"""Where the CLI's rich tables print: piped or logged (CI, a device call's log), rich fits 80 columns and cuts the
cells it must keep whole ("torch.c…", "1_Square_matrix_…"); a terminal keeps its own width."""

from __future__ import annotations

import sys

from rich.console import Console


def table_console(keep: int, stderr: bool = False) -> Console:
    """A console for a table whose unwrapped columns need ``keep`` characters in all: the terminal's own width when
    the stream is one, else at least ``keep`` (and 80)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else max(80, keep))
