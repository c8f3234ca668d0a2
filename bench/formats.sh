#!/usr/bin/env bash
# Issue 37's throughput targets in one command:
#  1. formats: rows/s of the CTR example's data (psgraph gen criteo, 200,000
#     rows; the label, 13 counts filled and log-transformed, 26 categoricals
#     hashed into 1,000,000 buckets, as examples/ctr.yaml reads them)
#     streamed in batches of 256 from the TSV, from TFRecords of the same
#     rows (write_tfrecord.py) and from a Parquet file DuckDB wrote of them
#     (BenchmarkFormats in exec/data); ROUNDS rounds, the three in turn
#     within each; the best rows/s of each and the ratios to
#     the TSV's (target: tfrecord and parquet >= 0.8); and, for a shared
#     machine, the least CPU time a row of each (the process's, user and
#     system) and the same ratios of it.
#  2. quoting: the RFC 4180 splitter against the split psgraph had before
#     quoting (a split at every delimiter) on unquoted Criteo-like lines
#     (BenchmarkSplit in internal/csvrow), in turn each round; the best MB/s of
#     each and the ratio (target: rfc4180 >= 0.9x before).
# Parquet needs node and @duckdb/node-api (.ci/run installs it in
# .cache/duckdb); without them that row is missing.
#   [ROUNDS=N] [BENCHTIME=5000x] bash bench/formats.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
benchtime=${BENCHTIME:-5000x}
best() { # name metric-unit: the best value of that unit over the lines of that sub-benchmark
  awk -v n="$1" -v u="$2" '$1 ~ "/"n"(-[0-9]+)?$" { for (i = 2; i < NF; i++) if ($(i+1) == u && $i > b) b = $i } END { print b + 0 }'
}
least() { # name metric-unit: the least value of that unit, as best
  awk -v n="$1" -v u="$2" '$1 ~ "/"n"(-[0-9]+)?$" { for (i = 2; i < NF; i++) if ($(i+1) == u && (b == "" || $i < b)) b = $i } END { print b + 0 }'
}
fmt_out= split_out=
for _ in $(seq "$rounds"); do # each round: the formats in turn, then the splitters in turn
  fmt_out+=$(go test ./exec/data -run '^$' -bench '^BenchmarkFormats$' -benchtime "$benchtime" -count 1)$'\n'
  split_out+=$(go test ./internal/csvrow -run '^$' -bench '^BenchmarkSplit$' -benchtime 2000x -count 1)$'\n'
done
echo "$fmt_out" | grep -E '^Benchmark'
tsv=$(echo "$fmt_out" | best tsv rows/s)
for f in tfrecord parquet; do
  r=$(echo "$fmt_out" | best "$f" rows/s)
  awk -v f="$f" -v r="$r" -v t="$tsv" 'BEGIN { if (r > 0) printf "%s: %.0f rows/s, %.2fx the TSV reader (%.0f rows/s); target >= 0.8x\n", f, r, r / t, t; else printf "%s: not measured\n", f }'
done
tsvcpu=$(echo "$fmt_out" | least tsv cpu-ns/row)
for f in tfrecord parquet; do
  c=$(echo "$fmt_out" | least "$f" cpu-ns/row)
  awk -v f="$f" -v c="$c" -v t="$tsvcpu" 'BEGIN { if (c > 0 && t > 0) printf "%s: %.0f ns of CPU a row, %.2fx the TSV reader'"'"'s rate in CPU time (%.0f ns a row)\n", f, c, t / c, t }'
done
echo "$split_out" | grep -E '^Benchmark'
before=$(echo "$split_out" | best before MB/s)
now=$(echo "$split_out" | best rfc4180 MB/s)
awk -v a="$now" -v b="$before" 'BEGIN { printf "quoted-CSV splitter on unquoted lines: %.0f MB/s, %.2fx the unquoted split (%.0f MB/s); target >= 0.9x\n", a, a / b, b }'
