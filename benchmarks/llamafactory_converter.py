"""Run LlamaFactory's own ShareGPT converter over an export's ``sharegpt_*.json`` and count the rows it skips.

Outside CI: LlamaFactory pins its own torch/transformers, so it runs in its own virtual environment
(default ``/tmp/lf-venv``, LlamaFactory 0.9.3), never in the project's::

    python3 -m venv /tmp/lf-venv && /tmp/lf-venv/bin/pip install "llamafactory==0.9.3" "pyarrow<16"
    python benchmarks/llamafactory_converter.py $ENVFACTORY_HOME/exports/<version>

The converter is ``llamafactory.data.converter.SharegptDatasetConverter`` with the export's own
``dataset_info.json`` columns and tags; a row it skips comes back with an empty ``_prompt`` and ``_response``.
CI checks the same documented rules with :func:`envfactory_assets.exports.formats.sharegpt_problems`.

``pip install llamafactory==0.9.3`` alone gives an environment that cannot import it: the newest pyarrow
needs NumPy 2 while LlamaFactory 0.9.3 pins ``numpy<2`` ("pyarrow requires NumPy 2.0 or newer, found
1.26.4"), so also ``pip install "pyarrow<16"`` there. Measured with that environment on an export of the
fixture environments' SFT rows with parallel calls (the ShareGPT test's rows): 16 rows, 0 skipped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

VENV_PYTHON = "/tmp/lf-venv/bin/python"

_CONVERT = r"""
import json, sys
from llamafactory.data.converter import SharegptDatasetConverter
from llamafactory.data.parser import DatasetAttr
from llamafactory.hparams import DataArguments

folder, name = sys.argv[1], sys.argv[2]
info = json.load(open(f"{folder}/dataset_info.json"))[name]
attr = DatasetAttr("file", dataset_name=name, formatting="sharegpt")
for key, value in {**info.get("columns", {}), **info.get("tags", {})}.items():
    setattr(attr, key, value)
converter = SharegptDatasetConverter(attr, DataArguments())
rows = json.load(open(f"{folder}/{info['file_name']}"))
skipped = [r["id"] for r in rows if not converter(r)["_response"]]
print(json.dumps({"dataset": name, "rows": len(rows), "skipped": len(skipped), "examples": skipped[:5]}))
"""


def main() -> int:
    """Print ``{"dataset", "rows", "skipped", "examples"}`` per split; exit 1 when any row is skipped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="an export version folder (holds dataset_info.json)")
    parser.add_argument("--python", default=VENV_PYTHON, help="python of the LlamaFactory virtualenv")
    args = parser.parse_args()
    info = json.loads((args.export / "dataset_info.json").read_text(encoding="utf-8"))
    skipped = 0
    for name in info:
        out = subprocess.run([args.python, "-c", _CONVERT, str(args.export), name], capture_output=True, text=True)
        if out.returncode:
            print(f"{name}: LlamaFactory's converter did not run:\n{out.stderr[-2000:]}", file=sys.stderr)
            return 2
        result = json.loads(out.stdout.strip().splitlines()[-1])
        skipped += result["skipped"]
        print(json.dumps(result))
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
