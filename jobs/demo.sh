#!/usr/bin/env bash
# README command one: set up, start the embedded broker, produce orders, run the ingest job
# with spark-submit, print what landed and the group's committed offsets.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v java >/dev/null 2>&1; then
  echo "installing a Java runtime for Spark..."
  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
python3 -m pip install -q -e ".[spark,embedded]"
exec python3 jobs/demo.py "$@"
