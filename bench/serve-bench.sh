#!/usr/bin/env bash
# psgraph serve's targets (issue 35), every figure in one command:
#   bash bench/serve-bench.sh [DIR]      (default DIR: a new temporary directory)
# examples/ctr.yaml is trained locally on ROWS generated rows; then, in
# alternating runs (predict, serve, predict, serve, ...) so a loaded
# machine weighs on both alike:
#   - psgraph predict over the ROWS rows: rows/s of the whole command;
#   - psgraph serve answering requests of 100 of those rows from 4
#     concurrent clients (hey, Debian's package; installed with apt-get
#     when missing and root): p99 latency and rows/s;
# and the server's resident memory against the model file's bytes + 64 MiB.
# Prints one line per target: the median figure over RUNS runs, the bound,
# and ok or MISSED.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$(mktemp -d)}
ROWS=${ROWS:-60000} STEPS=${STEPS:-300} RUNS=${RUNS:-3} REQUESTS=${REQUESTS:-3000}
if ! command -v hey >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hey >/dev/null
	else
		echo "serve-bench: needs hey (apt-get install hey)" >&2
		exit 1
	fi
fi
cd "$ROOT" && go build -o "$DIR/psgraph" .
PSG="$DIR/psgraph"
[ -f "$DIR/ctr.tsv" ] || "$PSG" gen criteo -o "$DIR/ctr.tsv" --rows "$ROWS" --seed 1 2>/dev/null
sed "s|csv: data/ctr.tsv|csv: $DIR/ctr.tsv|" examples/ctr.yaml >"$DIR/ctr.yaml"
[ -f "$DIR/ctr.safetensors" ] || "$PSG" run --role local "$DIR/ctr.yaml" --steps "$STEPS" --save "$DIR/ctr.safetensors" --log-every 0 >/dev/null 2>&1
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
lines = open(d + "/ctr.tsv").read().split("\n")[:100]
json.dump({"inputs": [{"name": "rows", "datatype": "BYTES", "shape": [100], "data": lines}]}, open(d + "/body.json", "w"))
PY
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
: >"$DIR/predict.txt"
: >"$DIR/serve.txt"
for run in $(seq "$RUNS"); do
	start=$(date +%s.%N)
	"$PSG" predict "$DIR/ctr.yaml" --init-from "$DIR/ctr.safetensors" --data "$DIR/ctr.tsv" -o "$DIR/pred.csv" >/dev/null 2>&1
	end=$(date +%s.%N)
	python3 -c "print($ROWS / ($end - $start))" >>"$DIR/predict.txt"

	addr=127.0.0.1:$(port)
	"$PSG" serve "$DIR/ctr.yaml" --init-from "$DIR/ctr.safetensors" --listen "$addr" 2>"$DIR/serve.log" &
	pid=$!
	until curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1; do sleep 0.05; done
	hey -n 200 -c 4 -m POST -T application/json -D "$DIR/body.json" "http://$addr/v2/models/ctr/infer" >/dev/null # warm: programs compiled
	hey -n "$REQUESTS" -c 4 -m POST -T application/json -D "$DIR/body.json" -o csv "http://$addr/v2/models/ctr/infer" >"$DIR/hey.csv"
	rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
	kill -TERM $pid
	wait $pid
	python3 - "$DIR/hey.csv" "$rss" >>"$DIR/serve.txt" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
lat = sorted(float(r["response-time"]) for r in rows)
bad = sum(1 for r in rows if r["status-code"] != "200")
offsets = [float(r["offset"]) for r in rows]
span = max(o + float(r["response-time"]) for o, r in zip(offsets, rows)) - min(offsets)
print(lat[int(0.99 * len(lat))] * 1000, len(rows) * 100 / span, int(sys.argv[2]) / 1024, bad)
PY
done
model_mib=$(python3 -c "import os; print(os.path.getsize('$DIR/ctr.safetensors') / 2**20)")
python3 - "$DIR" "$model_mib" <<'PY'
import statistics, sys
d, model = sys.argv[1], float(sys.argv[2])
pred = statistics.median(float(l) for l in open(d + "/predict.txt"))
runs = [list(map(float, l.split())) for l in open(d + "/serve.txt")]
p99 = statistics.median(r[0] for r in runs)
rps = statistics.median(r[1] for r in runs)
rss = max(r[2] for r in runs)
bad = sum(r[3] for r in runs)
def line(what, fig, bound, ok):
    print(f"{what:58s} {fig:>14s}   {bound:>22s}   {'ok' if ok else 'MISSED'}")
print(f"psgraph serve, examples/ctr.yaml, requests of 100 rows, 4 clients (hey); median of {len(runs)} alternating runs")
line("request p99", f"{p99:.2f} ms", "<= 5 ms", p99 <= 5)
line("throughput (serve rows/s / predict rows/s)", f"{rps:.0f}/{pred:.0f} = {rps/pred:.2f}x", ">= 0.7x", rps >= 0.7 * pred)
line("requests failed", f"{bad:.0f}", "0", bad == 0)
line("server RSS (max over runs)", f"{rss:.0f} MiB", f"<= {model:.0f} + 64 MiB", rss <= model + 64)
PY
