#!/usr/bin/env bash
# Issue 23's targets, local: the CTR example on the first 3M rows of
# psgraph gen criteo --rows 3100000 --vocab 2000000 --seed 1 with a
# 10M-bucket fixed table, a dynamic table (min_count 1) and a dynamic
# table with min_count 2, one after the other; the held-out AUC is eval's
# over the file's last 100,000 rows. Per model: GNU time's wall time of
# `run --steps 1` (start to step 1), of the whole run and its peak RSS,
# the run's summary line (steps/s, live rows) and eval's line.
#   bash bench/dyn_targets.sh PSGRAPH [DIR]   (DIR keeps the 725 MiB file)
set -euo pipefail
ps=${1:?usage: bench/dyn_targets.sh PSGRAPH [DIR]}
ex=$(cd "$(dirname "$0")/../examples" && pwd)
T=${2:-$(mktemp -d)}
mkdir -p "$T"
[ -s "$T/all.tsv" ] || "$ps" gen criteo -o "$T/all.tsv" --rows 3100000 --vocab 2000000 --seed 1 2>"$T/gen.err"
[ -s "$T/heldout.tsv" ] || tail -n 100000 "$T/all.tsv" >"$T/heldout.tsv"
steps=11718 # 11718 x 256 = 2,999,808 rows: the first 3M lines
sed -e 's/hash_buckets: 1000000/hash_buckets: 10000000/' -e 's/\[1000000, 16\]/[10000000, 16]/' -e "s#csv: data/ctr.tsv#csv: $T/all.tsv#" "$ex/ctr.yaml" >"$T/fixed.yaml"
sed -e 's/min_count: 2, ttl_steps: 2000/min_count: 1/' -e "s#csv: data/ctr-drift.tsv#csv: $T/all.tsv#" "$ex/ctr-dynamic.yaml" >"$T/min1.yaml"
sed -e 's/ttl_steps: 2000/ttl_steps: 0/' -e "s#csv: data/ctr-drift.tsv#csv: $T/all.tsv#" "$ex/ctr-dynamic.yaml" >"$T/min2.yaml"
for m in fixed min1 min2; do
  /usr/bin/time -f 'FIRST %e s' "$ps" run --role local "$T/$m.yaml" --steps 1 >/dev/null 2>"$T/$m.first.err"
  /usr/bin/time -f 'TIME %e s %M KiB' "$ps" run --role local "$T/$m.yaml" --steps $steps --save "$T/$m.safetensors" >"$T/$m.out" 2>"$T/$m.err"
  "$ps" eval "$T/$m.yaml" --init-from "$T/$m.safetensors" --data "$T/heldout.tsv" >"$T/$m.eval" 2>"$T/$m.eval.err"
  echo "== $m"
  grep FIRST "$T/$m.first.err"
  grep TIME "$T/$m.err"
  tail -1 "$T/$m.out"
  tail -1 "$T/$m.eval"
done
