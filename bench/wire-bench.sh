#!/usr/bin/env bash
# The figures of the distributed step's per-message cost (issue 38;
# docs/wire.md section 8, docs/performance.md "The message stream"), each
# the median of RUNS rounds, alternating this tree's build ("new") with
# OLD_TREE's ("old") within each round when --against is given, so that
# load weighs on both alike:
#   - the pservers' CPU per message received: BenchmarkPServerCPU
#     (transport; the digits and the DLRM 2x2 step's messages, each pserver
#     a process of its own), and its floor: the same messages over plain
#     Unix sockets (BenchmarkPServerCPU/digits-raw, /dlrm-raw),
#   - one 64 MiB tensor, 1x1, against a RAM-to-RAM TCP copy in the same
#     run (BenchmarkTensor64MiB), and a 64-byte round trip against a raw
#     TCP one, both ends in one process (BenchmarkRoundTrip64B) and each
#     a process of its own (BenchmarkRoundTrip64BProcesses),
#   - `psgraph train examples/digits-mlp.yaml --trainers 2 --pservers 2
#     --steps 3000` against a torch.distributed.rpc parameter server of the
#     same job (bench/digits_rpc_torch.py),
#   - DLRM, DCN-v2 and DeepFM 2x2 sync at the model's batch (128 per
#     trainer, `--steps 600`) against PyTorch's local steps/s at its best
#     (bench/zoo_torch.py speed: 1 or 2 threads, per field or fused;
#     OPENBLAS_NUM_THREADS=1, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
#     for the PyTorch commands alone). ZOO=0 skips them.
# PARTS picks the figures (default "transport digits zoo": the transport
# benchmarks, the digits job, the zoo jobs) and MODELS the zoo's models
# (default "dlrm dcn-v2 deepfm"); figures not run are left out of the table
# and null in the JSON.
# SHORT=1 runs every figure briefly (a check that the script works end to
# end, not a measurement): short benchmarks, fewer steps, a smaller zoo
# file.
# OLD_TREE is built from a copy with this tree's transport benchmarks
# (bench_test.go, pscpu_bench_test.go, pscpu_raw_bench_test.go,
# rtproc_bench_test.go: they use only the transport's API), so both sides
# run the same benchmark code.
#   [PARTS=...] [MODELS=...] [SHORT=1] bash bench/wire-bench.sh [--against OLD_TREE] [RUNS] [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
old=""
if [ "${1:-}" = "--against" ]; then
  old=$(cd "$2" && pwd)
  shift 2
fi
runs=${1:-3} out=${2:-wire-bench.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(pwd)
sides=(new)
build() { # TREE SIDE
  (cd "$1" && go build -o "$tmp/$2-psgraph" . && go test -c -o "$tmp/$2-transport.test" ./transport)
}
echo "wire-bench: building ..." >&2
build "$here" new
if [ -n "$old" ]; then
  mkdir "$tmp/old-tree"
  (cd "$old" && tar --exclude=.git -cf - .) | tar -xf - -C "$tmp/old-tree"
  cp transport/bench_test.go transport/pscpu_bench_test.go transport/pscpu_raw_bench_test.go transport/rtproc_bench_test.go "$tmp/old-tree/transport/"
  cp internal/testfix/cputime_*.go "$tmp/old-tree/internal/testfix/" # testfix.ProcessCPU, which they use
  build "$tmp/old-tree" old
  rm -rf "$tmp/old-tree"
  sides=(old new)
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "null"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
metric() { # FILE BENCH METRIC
  awk -v b="$2" -v m="$3" '$1 ~ "^"b"(-[0-9]+)?$" {for (i=2;i<=NF;i++) if ($i==m) print $(i-1)}' "$1"
}
steps() { sed -n 's/.*"steps_per_s": *\([0-9.e+]*\).*/\1/p' | tail -1 | awk '{printf "%.1f\n", $1}'; }
torch() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$@"; }
parts=" ${PARTS:-transport digits zoo} " models=${MODELS:-dlrm dcn-v2 deepfm}
part() { [[ "$parts" == *" $1 "* ]]; }
zoo=${ZOO:-1}
part zoo || zoo=0
if { part digits || [ "$zoo" != 0 ]; } && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "wire-bench: the digits and zoo figures need PyTorch: apt-get install python3-torch libopenblas0-pthread (or PARTS=transport)" >&2; exit 1
fi
# the sizes of a measurement, or of a SHORT check
benchtime=1s digits_steps=3000 rpc_steps=2000 zoo_rows=1100000 zoo_steps=600 torch_steps=400
if [ "${SHORT:-0}" != 0 ]; then
  benchtime=0.2s digits_steps=500 rpc_steps=300 zoo_rows=110000 zoo_steps=100 torch_steps=60
fi
if [ "$zoo" != 0 ]; then
  "$tmp/new-psgraph" gen criteo -o "$tmp/zoo.tsv" --rows "$zoo_rows" --vocab 1000 --truth fm --interaction 2 >/dev/null 2>&1
  head -n $((zoo_rows / 11 * 10)) "$tmp/zoo.tsv" >"$tmp/zoo-train.tsv"
  tail -n $((zoo_rows / 11)) "$tmp/zoo.tsv" >"$tmp/zoo-eval.tsv"
  rm "$tmp/zoo.tsv"
  for m in $models; do sed "s#data/zoo-#$tmp/zoo-#" "examples/$m.yaml" >"$tmp/$m.yaml"; done
fi
for r in $(seq "$runs"); do
  echo "wire-bench: round $r of $runs ($(cut -d' ' -f1-3 /proc/loadavg) load) ..." >&2
  for s in "${sides[@]}"; do
    if part transport; then
      "$tmp/$s-transport.test" -test.run '^$' -test.bench 'BenchmarkPServerCPU|BenchmarkTensor64MiB$|BenchmarkRoundTrip64B$|BenchmarkRoundTrip64BProcesses$' -test.count 1 -test.benchtime "$benchtime" >"$tmp/b.txt" 2>&1 || true
      metric "$tmp/b.txt" BenchmarkPServerCPU/digits ps-cpu-us/msg >>"$tmp/$s.cpu-digits"
      metric "$tmp/b.txt" BenchmarkPServerCPU/dlrm ps-cpu-us/msg >>"$tmp/$s.cpu-dlrm"
      metric "$tmp/b.txt" BenchmarkPServerCPU/digits-raw ps-cpu-us/msg >>"$tmp/$s.cpu-digits-raw"
      metric "$tmp/b.txt" BenchmarkPServerCPU/dlrm-raw ps-cpu-us/msg >>"$tmp/$s.cpu-dlrm-raw"
      metric "$tmp/b.txt" BenchmarkTensor64MiB MB/s >>"$tmp/$s.t64"
      metric "$tmp/b.txt" BenchmarkTensor64MiB raw-MB/s >>"$tmp/$s.raw64"
      metric "$tmp/b.txt" BenchmarkTensor64MiB x-raw >>"$tmp/$s.x64"
      metric "$tmp/b.txt" BenchmarkRoundTrip64B us/rt >>"$tmp/$s.rtt"
      metric "$tmp/b.txt" BenchmarkRoundTrip64B raw-us/rt >>"$tmp/$s.rawrtt"
      metric "$tmp/b.txt" BenchmarkRoundTrip64B x-raw >>"$tmp/$s.xrtt"
      metric "$tmp/b.txt" BenchmarkRoundTrip64BProcesses us/rt >>"$tmp/$s.prtt"
      metric "$tmp/b.txt" BenchmarkRoundTrip64BProcesses raw-us/rt >>"$tmp/$s.prawrtt"
      metric "$tmp/b.txt" BenchmarkRoundTrip64BProcesses x-raw >>"$tmp/$s.pxrtt"
    fi
    if part digits; then
      (cd examples && "$tmp/$s-psgraph" train digits-mlp.yaml --trainers 2 --pservers 2 --steps "$digits_steps" 2>/dev/null | steps) >>"$tmp/$s.digits"
    fi
  done
  if part digits; then
    torch bench/digits_rpc_torch.py examples/data/digits.csv --steps "$rpc_steps" 2>/dev/null | steps >>"$tmp/rpc" || true
  fi
  if [ "$zoo" != 0 ]; then
    for m in $models; do
      best=0
      for t in 1 2; do
        for f in "" --fused; do
          v=$(torch bench/zoo_torch.py speed "$m" "$tmp/zoo-train.tsv" --rows 20000 --steps "$torch_steps" --threads $t $f --cache 2>"$tmp/torch.err" | steps) ||
            { echo "wire-bench: bench/zoo_torch.py speed $m --threads $t $f failed:" >&2; tail -3 "$tmp/torch.err" >&2; exit 1; }
          best=$(awk -v a="$best" -v b="${v:-0}" 'BEGIN {print (b > a) ? b : a}')
        done
      done
      echo "$best" >>"$tmp/torch-$m"
      for s in "${sides[@]}"; do
        "$tmp/$s-psgraph" train "$tmp/$m.yaml" --trainers 2 --pservers 2 --steps "$zoo_steps" 2>/dev/null | steps >>"$tmp/$s.$m"
      done
    done
  fi
done
med() { if [ -f "$tmp/$1" ]; then median <"$tmp/$1"; else echo null; fi; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "null" && b != "null" && b > 0) printf "%.2f", a/b; else print "null"}'; }
rpc=$(med rpc)
declare -A V
for s in "${sides[@]}"; do
  for k in cpu-digits cpu-dlrm cpu-digits-raw cpu-dlrm-raw t64 raw64 x64 rtt rawrtt xrtt prtt prawrtt pxrtt digits dlrm dcn-v2 deepfm; do V[$s.$k]=$(med "$s.$k"); done
done
for m in dlrm dcn-v2 deepfm; do V[torch.$m]=$(med "torch-$m"); done
row() { # LABEL TARGET KEY [FORMAT]
  local line="| $1 |"
  for s in "${sides[@]}"; do line+=" ${V[$s.$3]} |"; done
  echo "$line $2 |"
}
head="| figure (median of $runs; machine load $(cut -d' ' -f1-3 /proc/loadavg)) |"
sep="| --- |"
for s in "${sides[@]}"; do head+=" $s |"; sep+=" --- |"; done
echo "$head target |"
echo "$sep --- |"
if part transport; then
row "pserver CPU per message received, digits 2x2 pattern (BenchmarkPServerCPU/digits, us)" "old / 2" cpu-digits
row "pserver CPU per message received, DLRM 2x2 pattern (BenchmarkPServerCPU/dlrm, us)" "old / 2" cpu-dlrm
row "the same, digits pattern over plain Unix sockets: the floor (BenchmarkPServerCPU/digits-raw, us)" "" cpu-digits-raw
row "the same, DLRM pattern over plain Unix sockets: the floor (BenchmarkPServerCPU/dlrm-raw, us)" "" cpu-dlrm-raw
row "64 MiB tensor 1x1 (BenchmarkTensor64MiB, MB/s)" "" t64
row "  raw TCP in the same run (MB/s)" "" raw64
row "  ratio to raw TCP" ">= 0.85" x64
row "64-byte round trip (BenchmarkRoundTrip64B, us)" "" rtt
row "  raw TCP in the same run (us)" "" rawrtt
row "  ratio to raw TCP" "<= 1.5" xrtt
row "64-byte round trip, trainer and pserver processes of their own (BenchmarkRoundTrip64BProcesses, us)" "" prtt
row "  raw TCP between two processes in the same run (us)" "" prawrtt
row "  ratio to raw TCP" "<= 1.5" pxrtt
fi
if part digits; then
line="| train 2x2 sync digits, steps/s (torch RPC parameter server: $rpc) |"
for s in "${sides[@]}"; do line+=" ${V[$s.digits]} = $(ratio "${V[$s.digits]}" "$rpc")x |"; done
echo "$line >= 10x |"
fi
if [ "$zoo" = 0 ]; then models=""; fi
for m in $models; do
  line="| $m 2x2 sync, batch 128 each, steps/s (PyTorch local at its best: ${V[torch.$m]}) |"
  for s in "${sides[@]}"; do line+=" ${V[$s.$m]} = $(ratio "${V[$s.$m]}" "${V[torch.$m]}")x |"; done
  echo "$line >= 0.9x |"
done
{
  echo "{\"runs\": $runs, \"machine\": \"$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\", \"torch_rpc_digits_steps_per_s\": $rpc,"
  for m in dlrm dcn-v2 deepfm; do echo " \"torch_local_$m\": ${V[torch.$m]},"; done
  n=0
  for s in "${sides[@]}"; do
    n=$((n + 1))
    echo " \"$s\": {\"pserver_cpu_us_per_msg_digits\": ${V[$s.cpu-digits]}, \"pserver_cpu_us_per_msg_dlrm\": ${V[$s.cpu-dlrm]},"
    echo "   \"tensor64mib_mb_per_s\": ${V[$s.t64]}, \"raw_tcp_mb_per_s\": ${V[$s.raw64]}, \"tensor64mib_x_raw\": ${V[$s.x64]},"
    echo "   \"rtt_us\": ${V[$s.rtt]}, \"raw_rtt_us\": ${V[$s.rawrtt]}, \"rtt_x_raw\": ${V[$s.xrtt]}, \"digits_2x2_steps_per_s\": ${V[$s.digits]},"
    echo -n "   \"dlrm_2x2_steps_per_s\": ${V[$s.dlrm]}, \"dcn-v2_2x2_steps_per_s\": ${V[$s.dcn-v2]}, \"deepfm_2x2_steps_per_s\": ${V[$s.deepfm]}}"
    if [ "$n" -lt "${#sides[@]}" ]; then echo ","; else echo; fi
  done
  echo "}"
} >"$out"
echo "wire-bench: wrote $out" >&2
