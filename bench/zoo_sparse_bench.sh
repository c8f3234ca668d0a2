#!/usr/bin/env bash
# The zoo models examples/wide-deep.yaml, two-tower.yaml and multi-hot.yaml
# against the same models in PyTorch (bench/zoo_sparse_torch.py), on data
# written by psgraph gen in this run (bench/history-2026-12.md, "Zoo: Wide &
# Deep, two-tower, multi-hot"). Called by .ci/bench; alone:
#   bash bench/zoo_sparse_bench.sh PSGRAPH RUNS DIR [ROWS]
# Prints one markdown row per measurement and writes DIR/zoo_sparse.json.
#
# Per model: local steps/s of psgraph (`run --role local`, the summary's
# steps_per_s over one pass) and of torch on 1 and on 2 threads (200 steps
# after 20 warm-up steps), each the median of RUNS runs, psgraph and torch
# alternating; torch's best is the better thread count. PyTorch runs with
# OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
# (this image pins an older, slower GEMM kernel); psgraph keeps the
# environment. Then a 2x2 sync job (`train --trainers 2 --pservers 2`,
# half a pass of 2 x 256 rows per step), trainer 0's steps/s, median of
# RUNS. Quality, one run each from one initial file (bench/zoo_sparse_torch.py
# init): after one pass, the held-out AUC of psgraph's predictions
# (`psgraph predict` on the held-out file) and of torch's, over all
# held-out rows; for two-tower the held-out recall@10 (psgraph's eval and
# torch's, in chunks of 1024 rows). The linear baseline (bench/zoo-linear.yaml,
# FTRL over the ids and counts) is trained and scored the same way.
set -euo pipefail
ps=$1 runs=$2 dir=$3 rows=${4:-250000}
here=$(cd "$(dirname "$0")" && pwd)
d="$dir/zoo-sparse"
mkdir -p "$d/data"
train_rows=$((rows * 4 / 5))
"$ps" gen criteo -o "$d/data/fm-all.tsv" --rows "$rows" --seed 1 --truth fm --history 8 2>"$d/gen.txt" >/dev/null
head -n "$train_rows" "$d/data/fm-all.tsv" >"$d/data/fm.tsv"
tail -n "$((rows - train_rows))" "$d/data/fm-all.tsv" >"$d/data/fm-eval.tsv"
awk -F'\t' '$1 == 1' "$d/data/fm.tsv" >"$d/data/clicks.tsv"
awk -F'\t' '$1 == 1' "$d/data/fm-eval.tsv" >"$d/data/clicks-eval.tsv"
bayes=$(sed -n 's/.*score AUC \([0-9.]*\) against.*/\1/p' "$d/gen.txt")
cp "$here"/../examples/wide-deep.yaml "$here"/../examples/two-tower.yaml "$here"/../examples/multi-hot.yaml "$here"/zoo-linear.yaml "$d/"

torch() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/zoo_sparse_torch.py" "$@"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "null"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
field() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p"; }
# steady METRICS: the steps/s of a run after its first 20 steps, as
# bench/zoo_sparse_torch.py times PyTorch's (20 warm-up steps, then the
# clock), from the progress file of `--log-every 20 --metrics`, whose
# lines give each logged step and the rate since the line before: the
# first steps pay for touching the optimizer state's fresh pages (the
# tables' adam moments: 256 MiB for two-tower, 0.02 to 0.6 s on this
# machine), which PyTorch pays in its warm-up.
steady() {
  awk '/"steps_per_s"/ {
    match($0, /"step":[0-9]+/); s = substr($0, RSTART + 7, RLENGTH - 7) + 0
    match($0, /"steps_per_s":[0-9.e+-]+/); r = substr($0, RSTART + 14, RLENGTH - 14) + 0
    if (s > 20 && r > 0) { t += (s - p) / r; n += s - p }
    p = s
  } END { if (n > 0) printf "%.1f\n", n / t; else print "null" }' "$1"
}
range_of() { sort -g "$1" | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%s-%s", lo, hi}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "null"}'; }

json="$d/zoo_sparse.json"
echo "{" >"$json"
for m in wide-deep multi-hot two-tower; do
  y="$d/$m.yaml" init="$d/$m-init.safetensors" popular=
  torch init "$y" "$init"
  # one pass over the training rows (the clicks for two-tower), 256 a step
  data=$d/data/fm.tsv
  [ "$m" = two-tower ] && data=$d/data/clicks.tsv
  steps=$(($(wc -l <"$data") / 256))
  : >"$d/ps.txt"; : >"$d/psall.txt"; : >"$d/t1.txt"; : >"$d/t2.txt"
  for _ in $(seq "$runs"); do
    "$ps" run --role local "$y" --init-from "$init" --steps "$steps" --log-every 20 --metrics "$d/m.jsonl" 2>/dev/null | tail -1 | field steps_per_s >>"$d/psall.txt"
    steady "$d/m.jsonl" >>"$d/ps.txt"
    torch bench "$y" --init "$init" --steps 220 --threads 1 --no-eval --cache "$d/$m.pkl" | field steps_per_s >>"$d/t1.txt"
    torch bench "$y" --init "$init" --steps 220 --threads 2 --no-eval --cache "$d/$m.pkl" | field steps_per_s >>"$d/t2.txt"
  done
  local_ps=$(median <"$d/ps.txt") t1=$(median <"$d/t1.txt") t2=$(median <"$d/t2.txt")
  best=$(awk -v a="$t1" -v b="$t2" 'BEGIN {print (a > b ? a : b)}')
  : >"$d/dist.txt"; : >"$d/distall.txt"
  for _ in $(seq "$runs"); do
    "$ps" train "$y" --trainers 2 --pservers 2 --steps $((steps / 2)) --init-from "$init" --log-every 20 --metrics "$d/m.jsonl" 2>/dev/null | tail -1 | field steps_per_s >>"$d/distall.txt"
    steady "$d/m.jsonl" >>"$d/dist.txt"
  done
  dist=$(median <"$d/dist.txt")
  # Quality after one pass, from the same initial file.
  "$ps" run --role local "$y" --init-from "$init" --steps "$steps" --save "$d/$m.safetensors" 2>/dev/null | tail -1 >"$d/$m-summary.json"
  torch bench "$y" --init "$init" --steps "$steps" --predict "$d/$m-torch.txt" --cache "$d/$m.pkl" >"$d/$m-torch.json"
  if [ "$m" = two-tower ]; then
    what="held-out recall@10"
    q_ps=$(field eval_recall10 <"$d/$m-summary.json") q_t=$(field recall10 <"$d/$m-torch.json")
    popular=$(torch popularity "$y" --cache "$d/$m.pkl" | field recall10)
    what="$what (items ranked by training frequency alone: $popular)"
  else
    what="held-out AUC"
    "$ps" predict "$y" --init-from "$d/$m.safetensors" --data "$d/data/fm-eval.tsv" -o "$d/$m-pred.csv" >/dev/null 2>&1
    q_ps=$(torch auc "$d/$m-pred.csv" "$d/data/fm-eval.tsv" | field auc) q_t=$(field auc <"$d/$m-torch.json")
  fi
  diff=$(awk -v a="$q_ps" -v b="$q_t" 'BEGIN {d = a - b; printf "%.4f", d < 0 ? -d : d}')
  echo "| $m: local steps/s after 20 warm-up steps, median (range) | $local_ps ($(range_of "$d/ps.txt")) vs PyTorch $best (1 thread $t1 ($(range_of "$d/t1.txt")), 2 threads $t2 ($(range_of "$d/t2.txt"))) = $(ratio "$local_ps" "$best")x; over the whole run $(median <"$d/psall.txt") ($(range_of "$d/psall.txt")) | >= 1.0x |"
  echo "| $m: 2x2 sync, trainer 0 steps/s after 20 warm-up steps | $dist ($(range_of "$d/dist.txt")) = $(ratio "$dist" "$best")x PyTorch local; over the whole run $(median <"$d/distall.txt") ($(range_of "$d/distall.txt")) | >= 0.5x |"
  echo "| $m: $what after one pass | $q_ps vs PyTorch $q_t (difference $diff) | within 0.003 |"
  key=${m//-/_} extra=
  [ -n "$popular" ] && extra=" \"${key}_popularity_quality\": $popular,"
  cat >>"$json" <<JSON
 "${key}_local_steps_per_s": $local_ps, "${key}_torch_1thread_steps_per_s": $t1, "${key}_torch_2threads_steps_per_s": $t2,
 "${key}_local_ratio": $(ratio "$local_ps" "$best"), "${key}_2x2_steps_per_s": $dist, "${key}_2x2_ratio": $(ratio "$dist" "$best"),
 "${key}_local_whole_run_steps_per_s": $(median <"$d/psall.txt"), "${key}_2x2_whole_run_steps_per_s": $(median <"$d/distall.txt"),
 "${key}_quality": $q_ps, "${key}_torch_quality": $q_t,$extra
JSON
done
# The linear baseline: the CTR models' AUC must be above it.
"$ps" run --role local "$d/zoo-linear.yaml" --steps $((train_rows / 256)) --save "$d/linear.safetensors" >/dev/null 2>&1
"$ps" predict "$d/zoo-linear.yaml" --init-from "$d/linear.safetensors" --data "$d/data/fm-eval.tsv" -o "$d/linear-pred.csv" >/dev/null 2>&1
linear=$(torch auc "$d/linear-pred.csv" "$d/data/fm-eval.tsv" | field auc)
echo "| linear baseline (bench/zoo-linear.yaml): held-out AUC after one pass | $linear (Bayes-optimal $bayes) | below wide-deep's and multi-hot's |"
echo " \"linear_auc\": $linear, \"bayes_auc\": $bayes}" >>"$json"
