#!/usr/bin/env bash
# Issue 23's targets, local: the CTR example on the first 3M rows of
# psgraph gen criteo --rows 3100000 --vocab 2000000 --seed 1 with a
# 10M-bucket fixed table, a dynamic table (min_count 1) and a dynamic
# table with min_count 2, one after the other; the held-out AUC is eval's
# over the file's last 100,000 rows. Per model: GNU time's wall time of
# `run --steps 1` (start to step 1), of the whole run and its peak RSS,
# the run's summary line (steps/s, live rows) and eval's line. ROUNDS=N
# (default 1) runs the three N times in alternation (fixed, min1, min2,
# fixed, ...), so the machine's load meets each model alike, and prints
# for each run its steps/s and its CPU time per step (user + system);
# start to step 1 and eval come from the first round.
#   [ROUNDS=N] bash bench/dyn_targets.sh PSGRAPH [DIR]   (DIR keeps the 725 MiB file)
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
rounds=${ROUNDS:-1}
for r in $(seq "$rounds"); do
  for m in fixed min1 min2; do
    if [ "$r" = 1 ]; then
      /usr/bin/time -f 'FIRST %e s' "$ps" run --role local "$T/$m.yaml" --steps 1 >/dev/null 2>"$T/$m.first.err"
    fi
    /usr/bin/time -f 'TIME %e s %M KiB %U user %S sys' "$ps" run --role local "$T/$m.yaml" --steps $steps --save "$T/$m.safetensors" >"$T/$m.out" 2>"$T/$m.err"
    echo "== $m (round $r of $rounds)"
    if [ "$r" = 1 ]; then
      "$ps" eval "$T/$m.yaml" --init-from "$T/$m.safetensors" --data "$T/heldout.tsv" >"$T/$m.eval" 2>"$T/$m.eval.err"
      grep FIRST "$T/$m.first.err"
    fi
    grep TIME "$T/$m.err"
    tail -1 "$T/$m.out"
    sps=$(tail -1 "$T/$m.out" | sed -n 's/.*"steps_per_s":\([0-9.e+]*\).*/\1/p')
    grep TIME "$T/$m.err" | awk -v m="$m" -v r="$r" -v n="$steps" -v s="$sps" '{printf "ROUND %s %s steps_per_s %s cpu_us_per_step %.0f\n", r, m, s, ($6 + $8) / n * 1e6}'
    if [ "$r" = 1 ]; then tail -1 "$T/$m.eval"; fi
  done
done
