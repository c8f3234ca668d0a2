#!/usr/bin/env bash
# Instructions a row of each reader of bench/formats.sh (BenchmarkFormats
# in exec/data: the CTR example's rows from the TSV, from TFRecords and
# from a Parquet file DuckDB wrote), counted by callgrind, which a shared
# machine's other load does not move as it moves time:
#   (Ir of the process at 300 batches - Ir at 100 batches) / (200 x 256 rows)
# each the least of 3 runs (GOGC=off and GOMAXPROCS=1: the benchmark
# allocates nothing a row, and the runs repeat to within 0.01%); and the
# ratios to the TSV reader's. The files are written once first
# (PSGRAPH_FORMATS_DIR): callgrind cannot run the writers (python, node).
# Parquet needs node and @duckdb/node-api, as for bench/formats.sh.
#   bash bench/formats-ir.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/data.test" ./exec/data
export PSGRAPH_FORMATS_DIR=$tmp/files
mkdir -p "$PSGRAPH_FORMATS_DIR"
cd exec/data
"$tmp/data.test" -test.run '^$' -test.bench '^BenchmarkFormats$' -test.benchtime 1x >/dev/null
ir() { # sub-benchmark batches: the least Ir of 3 runs
  for _ in 1 2 3; do
    GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
      "$tmp/data.test" -test.run '^$' -test.bench "^BenchmarkFormats\$/$1\$" -test.benchtime "$2x" 2>&1 | awk '/Collected/ { print $NF }'
  done | sort -n | head -1
}
tsv=
for f in tsv tfrecord parquet; do
  if [ "$f" = parquet ] && [ ! -e "$PSGRAPH_FORMATS_DIR/ctr.parquet" ]; then
    echo "parquet: not measured (node or @duckdb/node-api missing)"
    continue
  fi
  n=$(( ($(ir "$f" 300) - $(ir "$f" 100)) / (200 * 256) ))
  tsv=${tsv:-$n}
  awk -v f="$f" -v n="$n" -v t="$tsv" 'BEGIN { printf "%s: %d instructions a row, %.2fx the TSV reader'"'"'s rate (%d)\n", f, n, t / n, t }'
done
