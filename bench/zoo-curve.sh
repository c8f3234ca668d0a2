#!/usr/bin/env bash
# The held-out AUC of examples/dlrm.yaml and examples/logreg.yaml after one
# pass of 300,000, 1,000,000 and 3,000,000 rows of `psgraph gen criteo
# --vocab 1000 --truth fm`, at each --interaction strength given
# (bench/history-2026-12.md, "The model zoo": why the zoo's data doubles the
# interactions). Not part of .ci/bench: about 10 minutes per strength here.
#   bash bench/zoo-curve.sh PSGRAPH_BINARY [STRENGTH ...]    (default: 1 2)
# Each strength's file holds 3,030,000 rows: every pass trains on its
# first rows, and all are scored on its last 30,000 (psgraph predict, the
# AUC over the whole held-out set, ties 1/2). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
ps=$1
shift
strengths=(1 2)
[ $# -eq 0 ] || strengths=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
auc() {
  /usr/bin/python3 -c "
import sys; sys.path.insert(0, 'bench'); import zoo_torch as z, numpy as np
p = np.loadtxt('$1', delimiter=',', skiprows=1, ndmin=2)[:, -1]
y = np.array([float(l.split('\t', 1)[0]) for l in open('$2')])
print('%.4f' % z.auc(p, y))"
}
echo "| --interaction | rows of the pass | logreg | DLRM (sgd lr 0.1) | Bayes-optimal |"
echo "| --- | --- | --- | --- | --- |"
for s in "${strengths[@]}"; do
  "$ps" gen criteo -o "$tmp/all.tsv" --rows 3030000 --vocab 1000 --truth fm --interaction "$s" --probs "$tmp/probs.txt" >/dev/null 2>&1
  tail -n 30000 "$tmp/all.tsv" >"$tmp/eval.tsv"
  bayes=$(/usr/bin/python3 -c "
import sys; sys.path.insert(0, 'bench'); import zoo_torch as z, numpy as np
p = np.loadtxt('$tmp/probs.txt')[-30000:]
y = np.array([float(l.split('\t', 1)[0]) for l in open('$tmp/eval.tsv')])
print('%.4f' % z.auc(p, y))")
  for rows in 300000 1000000 3000000; do
    head -n "$rows" "$tmp/all.tsv" >"$tmp/train.tsv"
    line="| $s | $rows |"
    for m in logreg dlrm; do
      sed "s#data/zoo-train.tsv#$tmp/train.tsv#; s#data/zoo-eval.tsv#$tmp/eval.tsv#" "examples/$m.yaml" >"$tmp/$m.yaml"
      "$ps" run --role local "$tmp/$m.yaml" --save "$tmp/$m.safetensors" >/dev/null 2>&1
      "$ps" predict "$tmp/$m.yaml" --init-from "$tmp/$m.safetensors" --data "$tmp/eval.tsv" -o "$tmp/pred.csv" >/dev/null 2>&1
      line+=" $(auc "$tmp/pred.csv" "$tmp/eval.tsv") |"
    done
    echo "$line $bayes |"
  done
done
