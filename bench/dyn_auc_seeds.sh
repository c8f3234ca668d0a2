#!/usr/bin/env bash
# Held-out AUC of the dynamic table (min_count 1) against the 10M-bucket
# fixed table over several seeds of the models' initialization (the same
# data): bench/dyn_targets.sh's models with every `seed: N` of the model
# made N + 100k for k in SEEDS, trained on the first ROWS rows of psgraph
# gen criteo --rows ROWS+100000 --vocab 2000000 --seed 1 and evaluated on
# its last 100,000 (held out). Then what the dynamic model's held-out AUC
# is when the held-out keys it never saw read, instead of zeros (the
# model file as saved), their initial rows (as a fixed table's untouched
# bucket does: drawn from (seed, key)) or the mean of its trained rows:
# the keys are added to the model file (python3 with numpy) and eval run
# again. Prints one line per model and experiment.
#   ROWS=1000000 SEEDS="0 1 2" bash bench/dyn_auc_seeds.sh PSGRAPH DIR
set -euo pipefail
ps=${1:?usage: bench/dyn_auc_seeds.sh PSGRAPH DIR}
T=${2:?usage: bench/dyn_auc_seeds.sh PSGRAPH DIR}
rows=${ROWS:-1000000}
ex=$(cd "$(dirname "$0")/../examples" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$T"
[ -s "$T/all.tsv" ] || "$ps" gen criteo -o "$T/all.tsv" --rows $((rows + 100000)) --vocab 2000000 --seed 1 2>"$T/gen.err"
[ -s "$T/heldout.tsv" ] || tail -n 100000 "$T/all.tsv" >"$T/heldout.tsv"
steps=$((rows / 256))
for k in ${SEEDS:-0 1 2}; do
  reseed() { perl -pe "s/seed: (\d+)/'seed: '.(\$1+100*$k)/ge"; }
  sed -e 's/hash_buckets: 1000000/hash_buckets: 10000000/' -e 's/\[1000000, 16\]/[10000000, 16]/' -e "s#csv: data/ctr.tsv#csv: $T/all.tsv#" "$ex/ctr.yaml" | reseed >"$T/fixed-$k.yaml"
  sed -e 's/min_count: 2, ttl_steps: 2000/min_count: 1/' -e "s#csv: data/ctr-drift.tsv#csv: $T/all.tsv#" "$ex/ctr-dynamic.yaml" | reseed >"$T/min1-$k.yaml"
  for m in fixed min1; do
    n=$m-$k
    "$ps" run --role local "$T/$n.yaml" --steps $steps --save "$T/$n.safetensors" >"$T/$n.out" 2>"$T/$n.err"
    echo "$n $("$ps" eval "$T/$n.yaml" --init-from "$T/$n.safetensors" --data "$T/heldout.tsv" 2>"$T/$n.eval.err" | tail -1)"
    [ "$m" = fixed ] && rm -f "$T/$n.safetensors"
  done
done
# The held-out file's keys and their initial rows: one pass over it with
# a learning rate too small to change a float32 row (every key admitted).
sed -e "s#csv: $T/all.tsv#csv: $T/heldout.tsv#" -e 's/lr: 0.02/lr: 1e-30/' "$T/min1-0.yaml" >"$T/heldout-keys.yaml"
"$ps" run --role local "$T/heldout-keys.yaml" --batch 250 --steps 400 --save "$T/heldout-keys.safetensors" >/dev/null 2>"$T/heldout-keys.err"
for k in ${SEEDS:-0 1 2}; do
  (cd "$T" && /usr/bin/python3 "$here/dyn_unseen_default.py" "min1-$k.safetensors" heldout-keys.safetensors)
  for d in init mean; do
    echo "min1-$k unseen=$d $("$ps" eval "$T/min1-$k.yaml" --init-from "$T/unseen-$d.safetensors" --data "$T/heldout.tsv" 2>/dev/null | tail -1)"
  done
done
