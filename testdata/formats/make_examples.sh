#!/usr/bin/env bash
# Writes the data files of examples/formats: look-alikes of DeepCTR's
# sample files (samples.py), the Criteo one as DeepCTR's gen_tfrecords.py
# writes TFRecords (write_tfrecord.py, gzipped) and as a Parquet file
# DuckDB writes (write_parquet.mjs; needs node and @duckdb/node-api in
# .cache/duckdb, as .ci/run installs it). Deterministic: running it again
# writes the same CSVs and TFRecords.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=examples/formats
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 testdata/formats/samples.py "$out"
/usr/bin/python3 testdata/formats/write_tfrecord.py criteo "$out/criteo_sample.txt" "$tmp"
cp "$tmp/criteo.tfrecords.gz" "$out/"
PSGRAPH_DUCKDB_NODE="${PSGRAPH_DUCKDB_NODE:-$PWD/.cache/duckdb}" \
  node testdata/formats/write_parquet.mjs "$out/criteo.parquet" 100 "SELECT * FROM read_csv('$out/criteo_sample.txt')"
