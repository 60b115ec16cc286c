#!/usr/bin/env bash
# Builds fastlog/spark/jvm/fastlog-spark.jar, the JVM batch reader of format "fastlog"
# (sources in fastlog/spark/jvm/src), with javac and jar against the jars PySpark ships.
# Usage: scripts/build-spark-jar.sh [python]   (the Python whose pyspark to compile against)
# Prints why and exits 0 when javac or pyspark is missing (the Python source works alone).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
SRC=fastlog/spark/jvm/src
OUT=fastlog/spark/jvm/fastlog-spark.jar
if ! command -v javac >/dev/null 2>&1 || ! command -v jar >/dev/null 2>&1; then
  echo "javac not found: the Spark JVM reader is not built (scripts/install-system-deps.sh installs a JDK)"
  exit 0
fi
JARS=$("$PY" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null || true)
if [ -z "$JARS" ] || [ ! -d "$JARS" ]; then
  echo "pyspark not installed for $PY: the Spark JVM reader is not built"
  exit 0
fi
# up to date: nothing under src newer than the jar
if [ -f "$OUT" ] && [ -z "$(find "$SRC" -newer "$OUT" -type f | head -1)" ]; then
  exit 0
fi
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
javac -nowarn --release 17 -d "$BUILD" -cp "$JARS/*" $(find "$SRC" -name '*.java')
cp -r "$SRC/META-INF" "$BUILD/"
jar cf "$OUT.tmp" -C "$BUILD" .
mv "$OUT.tmp" "$OUT"
