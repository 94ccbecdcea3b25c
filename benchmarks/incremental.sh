#!/usr/bin/env bash
# Time one incremental re-synthesis against an existing default run (run `envfactory run` first):
# add one document to the user folder, rebuild its partition, then re-synthesize the spanning stages.
# Prints the wall time of each step; the README's "Incremental re-synthesis" section reports the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
ENVFACTORY="${ENVFACTORY:-.venv/bin/envfactory}"
export ENVFACTORY_HOME="${ENVFACTORY_HOME:-$PWD/.envfactory}"
mkdir -p "$ENVFACTORY_HOME/resources"
sed 's/"x-providerName": "bookshop.example"/"x-providerName": "bench_bookshop"/' \
  envfactory_assets_tests/fixtures/openapi/bookshop.json > "$ENVFACTORY_HOME/resources/bench_bookshop.json"
t0=$(date +%s)
$ENVFACTORY run --select "source_resources,environments,verified_environments" --partition bench_bookshop >/dev/null 2>&1
t1=$(date +%s)
$ENVFACTORY run --select "tool_graph,tool_chains,raw_trajectories,refined_trajectories,sft_dataset,rl_dataset" \
  >/dev/null 2>&1
t2=$(date +%s)
rm "$ENVFACTORY_HOME/resources/bench_bookshop.json"
echo "partition bench_bookshop (scan + build + verify): $((t1 - t0)) s"
echo "re-synthesis tool_graph .. datasets:             $((t2 - t1)) s"
