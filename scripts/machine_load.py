"""Load a machine the way a pipeline beside the tests does, to check that a test holds under load.

Starts, as children of its own: ``--allocators`` processes that allocate 200 MiB, touch every page, hold it
0.2 s and free it, in a loop; ``--burners`` CPU burners; ``--churners`` processes that write, read and delete a
64 MiB file in ``--folder`` (page cache). Writes the children's pids, space-separated, to ``pid_file`` and
exits; stop them with ``kill $(cat pid_file)``.

Usage: ``python scripts/machine_load.py PID_FILE [--allocators 2] [--burners 3] [--churners 1] [--folder /tmp]``
"""

from __future__ import annotations

import argparse
import os
import time


def _allocate() -> None:
    while True:
        block = bytearray(200 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(0.2)
        del block
        time.sleep(0.2)


def _burn() -> None:
    count = 0
    while True:
        count += 1


def _churn(folder: str) -> None:
    path = os.path.join(folder, f"machine-load-{os.getpid()}")
    try:
        while True:
            with open(path, "wb") as handle:
                handle.write(os.urandom(1 << 20) * 64)
            with open(path, "rb") as handle:
                handle.read()
            os.unlink(path)
            time.sleep(0.3)
    finally:
        if os.path.exists(path):
            os.unlink(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pid_file")
    parser.add_argument("--allocators", type=int, default=2)
    parser.add_argument("--burners", type=int, default=3)
    parser.add_argument("--churners", type=int, default=1)
    parser.add_argument("--folder", default="/tmp")
    args = parser.parse_args()
    jobs = [_allocate] * args.allocators + [_burn] * args.burners + [lambda: _churn(args.folder)] * args.churners
    pids = []
    for job in jobs:
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # no inherited pipe keeps a caller's $(...) waiting
                os.dup2(devnull, fd)
            job()
            os._exit(0)
        pids.append(pid)
    with open(args.pid_file, "w") as handle:
        handle.write(" ".join(map(str, pids)))


if __name__ == "__main__":
    main()
