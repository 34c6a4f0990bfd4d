#!/usr/bin/env bash
# docs/pipelines.md's one command: set up, start the embedded broker, produce orders, run the
# example pipeline twice with spark-pipelines (new orders between), print what landed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v java >/dev/null 2>&1; then
  echo "installing a Java runtime for Spark..."
  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
python3 -m pip install -q -e ".[spark,embedded,pipelines]"
exec spark-groups pipeline-demo
