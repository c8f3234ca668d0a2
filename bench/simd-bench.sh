#!/usr/bin/env bash
# Every figure of the AVX2 / portable-kernel targets (docs/performance.md,
# "The AVX2 and Go paths") in one command:
#   bash bench/simd-bench.sh [RUNS] [OLD_PSGRAPH]
# RUNS rounds (default 5), each running psgraph and its PyTorch twin one
# after the other, so that the machine's load weighs on both alike; the
# table gives the median of each and the ratio of the medians:
#   - local digits MLP 64-128-10 and wide MLP 64-2048-10
#     (BenchmarkDigitsStep, BenchmarkWideStep; bench/mlp_torch.py);
#   - the wide MLP on the Go path (-tags purego) against the AVX2 path, and
#     the GEMMs' share of the machine's FMA peak on each;
#   - the 10M-row CTR example (as .ci/bench's ctr10m; ctr_example_torch.py);
#   - canonical DLRM (examples/dlrm.yaml; bench/zoo_torch.py speed);
#   - `psgraph split` of the 100k-op model of BenchmarkSplitEndToEnd (4
#     trainers, 8 pservers), against OLD_PSGRAPH when given: the two
#     binaries one after the other, which goes first alternating by round.
# PARTS=split runs only the split rows (no PyTorch needed):
#   PARTS=split bash bench/simd-bench.sh 5 /tmp/psgraph-0bc071f
# psgraph runs on the AVX2 path: where the CPU has AVX-512, every psgraph
# command and Go benchmark runs with GODEBUG=cpu.avx512f=off, and the
# table says which path each figure is from (psgraph version). PyTorch runs
# at its best: OPENBLAS_NUM_THREADS=1, OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset for its command alone, the better of 1 and 2
# threads (and for DLRM, of one table per field or fused tables). Needs
# Debian's python3-torch and libopenblas0-pthread. Writes
# simd-bench.json beside the table (SIMD_BENCH_OUT overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
runs=${1:-5} old=${2:-} out=${SIMD_BENCH_OUT:-simd-bench.json} parts=${PARTS:-all}
case $parts in
  all | split) ;;
  *) echo "simd-bench: PARTS is all (the default) or split, not $parts" >&2; exit 2 ;;
esac
if [ -n "$old" ] && ! [ -x "$old" ]; then
  echo "simd-bench: OLD_PSGRAPH $old is not an executable" >&2; exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$parts" = all ] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "simd-bench: python3-torch missing (apt-get install python3-torch)" >&2; exit 1
fi
if [ "$parts" = all ] && ! ls /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 >/dev/null 2>&1; then
  echo "simd-bench: PyTorch would run on the reference BLAS; install libopenblas0-pthread" >&2; exit 1
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "null"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
range() { sort -g "$1" | awk 'NR==1 {lo=$1} {hi=$1} END {if (NR) printf "%s-%s", lo, hi; else printf "null"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0 && a != "null") printf "%.2f", a/b; else print "null"}'; }
field() { sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | head -1; }
metric() { awk -v m="$1" '/^Benchmark/ {for (i=2;i<=NF;i++) if ($i==m) print $(i-1)}'; }
torch() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$@"; }

go build -o "$tmp/psgraph" .
ps=$tmp/psgraph
avx2=()
if [ "$("$ps" version | sed -n 's/.*kernels \([a-z0-9]*\),.*/\1/p')" = avx512 ]; then
  avx2=(GODEBUG=cpu.avx512f=off)
fi
on() { env "${avx2[@]}" "$@"; } # a psgraph command on the AVX2 path
path=$(on "$ps" version | sed -n 's/.*; \(kernels .*\))$/\1/p')
if [ "$parts" = all ]; then
go build -tags purego -o "$tmp/psgraph-go" .
gopath=$("$tmp/psgraph-go" version | sed -n 's/.*; \(kernels .*\))$/\1/p')
go test -c -o "$tmp/program.test" ./exec/program
go test -c -tags purego -o "$tmp/program-go.test" ./exec/program
step() { # step TEST BENCH: a step benchmark of exec/program, 3 s, into $tmp/b
  (cd exec/program && on "$1" -test.run '^$' -test.bench "^$2\$" -test.benchtime 3s) >"$tmp/b"
}

# The 10M-row CTR job's data and model, as .ci/bench makes them.
"$ps" gen criteo -o "$tmp/ctr600k.tsv" --rows 600000 --seed 1 >/dev/null 2>&1
sed -e 's/hash_buckets: 1000000/hash_buckets: 10000000/' -e 's/\[1000000, 16\]/[10000000, 16]/' \
  -e "s#csv: data/ctr.tsv#csv: $tmp/ctr600k.tsv#" examples/ctr.yaml >"$tmp/ctr10m.yaml"
# DLRM on the zoo's data (bench/zoo-bench.sh's generator, fewer rows: 1500
# steps of 128 read 192,000).
"$ps" gen criteo -o "$tmp/zoo-train.tsv" --rows 200000 --vocab 1000 --truth fm --interaction 2 >/dev/null 2>&1
cp "$tmp/zoo-train.tsv" "$tmp/zoo-eval.tsv"
sed "s#data/zoo-#$tmp/zoo-#" examples/dlrm.yaml >"$tmp/dlrm.yaml"
fi
# The split model: partition's mixedModel of 33,334 widths of 8 (33,333
# layers of matmul, add, relu; momentum), BenchmarkSplitEndToEnd's.
/usr/bin/python3 - "$tmp/deep.yaml" <<'PY'
import sys
n = 33333
out = ["psgraph: 1\nname: mixed\ndata:\n  synthetic: {rows: 64, features: 8, classes: 8}\n  features: {name: x}\n  label: {name: y}\nparams:\n"]
out += ["  W%d: {shape: [8, 8], init: {type: he_normal}}\n  b%d: {shape: [8]}\n" % (i, i) for i in range(n)]
out.append("ops:\n")
prev = "x"
for i in range(n):
    out.append("  - {type: matmul, inputs: [%s, W%d], outputs: [m%d]}\n  - {type: add, inputs: [m%d, b%d], outputs: [a%d]}\n" % (prev, i, i, i, i, i))
    prev = "a%d" % i
    if i + 1 < n:
        out.append("  - {type: relu, inputs: [a%d], outputs: [r%d]}\n" % (i, i))
        prev = "r%d" % i
out.append("  - {type: softmax_cross_entropy, inputs: [%s, y], outputs: [loss]}\ntrain:\n  loss: loss\n  batch: 8\n  optimizer: {type: momentum, lr: 0.01}\n" % prev)
open(sys.argv[1], "w").write("".join(out))
PY
split() { # split BINARY NAME: one `psgraph split` of the model; its wall
  # seconds into $tmp/split.NAME, its processor seconds (user + system)
  # into $tmp/split.NAME.cpu
  rm -rf "$tmp/plan"
  local t TIMEFORMAT='%R %U %S'
  t=$({ time on "$1" split "$tmp/deep.yaml" --trainers 4 --pservers 8 -o "$tmp/plan" >/dev/null 2>&1; } 2>&1)
  if ! [ -s "$tmp/plan/plan.yaml" ]; then
    echo "simd-bench: $1 split wrote no plan" >&2; exit 1
  fi
  echo "$t" | awk '{printf "%.2f\n", $1}' >>"$tmp/split.$2"
  echo "$t" | awk '{printf "%.2f\n", $2 + $3}' >>"$tmp/split.$2.cpu"
}
splits() { # round R: the new binary and the old one, the first alternating
  if [ -z "$old" ]; then split "$ps" new; return; fi
  if [ $(($1 % 2)) = 1 ]; then split "$ps" new; split "$old" old; else split "$old" old; split "$ps" new; fi
}
: >>"$tmp/split.old"
: >>"$tmp/split.old.cpu"

if [ "$parts" = split ]; then
  echo "simd-bench: $runs rounds of psgraph split${old:+ against $old} ..." >&2
  for r in $(seq "$runs"); do
    splits "$r"
  done
  sn=$(median <"$tmp/split.new") so=$(median <"$tmp/split.old")
  cn=$(median <"$tmp/split.new.cpu") co=$(median <"$tmp/split.old.cpu")
  cat <<TABLE
$(nproc) cores of $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average $(cut -d' ' -f1-3 /proc/loadavg); medians of $runs alternating rounds (ranges in parentheses); processor seconds are user + system.

| psgraph split, 100k-op model, 4 trainers x 8 pservers | wall s | processor s | target |
| --- | --- | --- | --- |
| this psgraph | $sn ($(range "$tmp/split.new")) | $cn ($(range "$tmp/split.new.cpu")) | < 4 s |
${old:+| old binary $old | $so ($(range "$tmp/split.old")) | $co ($(range "$tmp/split.old.cpu")) | |}
TABLE
  cat >"$out" <<JSON
{"machine": "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)", "runs": $runs, "parts": "split",
 "split_s": $sn, "split_old_s": $so, "split_cpu_s": $cn, "split_old_cpu_s": $co}
JSON
  echo "simd-bench: wrote $out" >&2
  exit 0
fi

echo "simd-bench: $runs rounds on $path ..." >&2
for r in $(seq "$runs"); do
  echo "simd-bench: round $r of $runs" >&2
  step "$tmp/program.test" BenchmarkDigitsStep
  metric steps/s <"$tmp/b" >>"$tmp/digits.ps"
  torch bench/mlp_torch.py digits 3000 1,2 | grep torch-best | field steps_per_s >>"$tmp/digits.torch"
  step "$tmp/program.test" BenchmarkWideStep
  metric steps/s <"$tmp/b" >>"$tmp/wide.ps"
  metric GEMM-GFLOP/s <"$tmp/b" >>"$tmp/wide.gflops"
  torch bench/mlp_torch.py wide 300 1,2 | grep torch-best | field steps_per_s >>"$tmp/wide.torch"
  step "$tmp/program-go.test" BenchmarkWideStep
  metric steps/s <"$tmp/b" >>"$tmp/wide.go"
  metric GEMM-GFLOP/s <"$tmp/b" >>"$tmp/wide.go.gflops"
  on "$ps" run --role local "$tmp/ctr10m.yaml" --steps 2000 2>/dev/null | tail -1 | sed -n 's/.*"steps_per_s":\([0-9.e+]*\).*/\1/p' >>"$tmp/ctr.ps"
  torch bench/ctr_example_torch.py "$tmp/ctr600k.tsv" 1000 10000000 1,2 2>/dev/null | grep torch-best | field steps_per_s >>"$tmp/ctr.torch"
  on "$ps" run --role local "$tmp/dlrm.yaml" --steps 1500 2>/dev/null | tail -1 | sed -n 's/.*"steps_per_s":\([0-9.e+]*\).*/\1/p' >>"$tmp/dlrm.ps"
  best=0
  for t in 1 2; do
    for f in "" --fused; do
      s=$(torch bench/zoo_torch.py speed dlrm "$tmp/zoo-train.tsv" --rows 20000 --steps 400 --threads $t $f --cache 2>/dev/null | field steps_per_s)
      best=$(awk -v a="$best" -v b="${s:-0}" 'BEGIN {print (b > a) ? b : a}')
    done
  done
  echo "$best" >>"$tmp/dlrm.torch"
  splits "$r"
done

d=$(median <"$tmp/digits.ps") dt=$(median <"$tmp/digits.torch")
w=$(median <"$tmp/wide.ps") wt=$(median <"$tmp/wide.torch")
wg=$(median <"$tmp/wide.go")
gf=$(median <"$tmp/wide.gflops") ggf=$(median <"$tmp/wide.go.gflops")
c=$(median <"$tmp/ctr.ps") ct=$(median <"$tmp/ctr.torch")
l=$(median <"$tmp/dlrm.ps") lt=$(median <"$tmp/dlrm.torch")
sn=$(median <"$tmp/split.new") so=$(median <"$tmp/split.old")
# The FMA peak: one core's, measured (BenchmarkFMAPeak: 12 independent
# 8-lane FMA chains, at the clock the core really runs, which
# /proc/cpuinfo's MHz need not be; the best of three), times the cores.
mhz=$(awk -F: '/^cpu MHz/ {print $2; exit}' /proc/cpuinfo | xargs)
core=$(on go test ./exec/blas -run '^$' -bench 'BenchmarkFMAPeak' -count 3 2>/dev/null | metric GFLOP/s | sort -g | tail -1)
peak=$(awk -v n="$(nproc)" -v c="${core:-0}" 'BEGIN {printf "%.0f", n*c}')
frac() { awk -v a="$1" -v p="$peak" 'BEGIN {if (p > 0 && a != "null") printf "%.0f%%", 100*a/p; else print "null"}'; }

cat <<TABLE
Paths: psgraph $path (Go path: $gopath); $(nproc) cores of $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) (/proc/cpuinfo: ${mhz} MHz); medians of $runs alternating rounds (ranges in parentheses).

| job | psgraph | PyTorch at its best | ratio | target |
| --- | --- | --- | --- | --- |
| local digits MLP 64-128-10, batch 64 (BenchmarkDigitsStep) | $d steps/s ($(range "$tmp/digits.ps")) | $dt ($(range "$tmp/digits.torch")) | $(ratio "$d" "$dt")x | >= 2.0x |
| local wide MLP 64-2048-10, batch 256 (BenchmarkWideStep) | $w steps/s ($(range "$tmp/wide.ps")) | $wt ($(range "$tmp/wide.torch")) | $(ratio "$w" "$wt")x | >= 1.5x |
| local CTR example, 10M x 16 table, 600k rows | $c steps/s ($(range "$tmp/ctr.ps")) | $ct ($(range "$tmp/ctr.torch")) | $(ratio "$c" "$ct")x | >= 3x |
| canonical DLRM (examples/dlrm.yaml), local | $l steps/s ($(range "$tmp/dlrm.ps")) | $lt ($(range "$tmp/dlrm.torch")) | $(ratio "$l" "$lt")x | >= 1.5x |
| wide MLP, Go path (-tags purego) against AVX2 path | $wg steps/s ($(range "$tmp/wide.go")) vs $w | | AVX2 $(ratio "$w" "$wg")x faster | <= 2.5x |
| wide MLP GEMMs (165.7 MFLOP a step) against the FMA peak, $(nproc) x $core = $peak GFLOP/s (BenchmarkFMAPeak) | AVX2 $gf GFLOP/s = $(frac "$gf"); Go $ggf = $(frac "$ggf") | | | |
| psgraph split, 100k-op model, 4 trainers x 8 pservers | $sn s ($(range "$tmp/split.new")) | ${old:+old binary $so s ($(range "$tmp/split.old"))} | | < 4 s |
TABLE

cat >"$out" <<JSON
{"machine": "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $mhz MHz", "runs": $runs, "path": "$path", "go_path": "$gopath",
 "digits_steps_per_s": $d, "digits_torch": $dt, "digits_ratio": $(ratio "$d" "$dt"),
 "wide_steps_per_s": $w, "wide_torch": $wt, "wide_ratio": $(ratio "$w" "$wt"),
 "ctr10m_steps_per_s": ${c:-null}, "ctr10m_torch": ${ct:-null}, "ctr10m_ratio": $(ratio "$c" "$ct"),
 "dlrm_steps_per_s": ${l:-null}, "dlrm_torch": ${lt:-null}, "dlrm_ratio": $(ratio "$l" "$lt"),
 "wide_go_steps_per_s": $wg, "avx2_over_go": $(ratio "$w" "$wg"),
 "wide_gemm_gflops": $gf, "wide_go_gemm_gflops": $ggf, "fma_peak_core_gflops": ${core:-null}, "fma_peak_gflops": $peak,
 "split_s": $sn, "split_old_s": $so}
JSON
echo "simd-bench: wrote $out" >&2
