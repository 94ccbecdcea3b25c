"""Another process holding a store file open, as a running ``envfactory report`` (read-only) or run (read-write)
does, for the tests of what the store and the commands do beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def hold_store(path: Path, read_only: bool) -> subprocess.Popen[str]:
    """A second process that opens ``path`` (read-only or read-write), says so, and holds it until killed; the
    caller kills and waits for it."""
    code = (
        "import time, duckdb\n"
        f"con = duckdb.connect({str(path)!r}, read_only={read_only})\n"
        "print('holding', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder
