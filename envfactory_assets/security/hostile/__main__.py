"""``python -m envfactory_assets.security.hostile [--known-escapes]``: run the corpus, print the table.

Exits 1 when any sample escaped or did not end as expected.
"""

from __future__ import annotations

import argparse
import sys
import time

from envfactory_assets.security.hostile.runner import DEFAULT_LIMITS, format_table, run_corpus
from envfactory_assets.security.hostile.samples import ESCAPED, KNOWN_ESCAPES, SAMPLES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envfactory_assets.security.hostile")
    parser.add_argument("--known-escapes", action="store_true", help="also run the known escapes")
    args = parser.parse_args(argv)
    samples = (*SAMPLES, *KNOWN_ESCAPES) if args.known_escapes else SAMPLES
    started = time.monotonic()
    rows = run_corpus(DEFAULT_LIMITS, samples)
    print(format_table(rows))
    bad = [row for row in rows if row["outcome"] == ESCAPED or not row["as_expected"]]
    for row in bad:
        print(f"\n{row['name']}: {row['observed']}: {row['detail']}")
    print(f"\n{len(rows)} samples in {time.monotonic() - started:.1f} s; {len(bad)} not as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
