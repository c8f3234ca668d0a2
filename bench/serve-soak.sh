#!/usr/bin/env bash
# A soak of psgraph serve (issue 35): examples/ctr.yaml served for
# DURATION (default 10m) while 4 clients (hey) send requests of 100 rows,
# and the model changes under it: with MODE=follow (the default) a 2x2 job
# trains and the server is a replica following it (psgraph serve --plan);
# with MODE=reload the model file is replaced by another and reloaded
# (SIGHUP) every RELOAD seconds (default 5). Samples the server's resident
# memory every 10 s and prints the first sample after a minute, the last,
# the most, the bound (the model file's bytes + 64 MiB) and the requests
# that failed.
#   bash bench/serve-soak.sh [DIR]
# (go test ./exec/serve -run TestSoakMemoryIsFlat -soak 30s is the short,
# in-process soak of requests and updates that .ci/run runs.)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$(mktemp -d)}
DURATION=${DURATION:-10m} RELOAD=${RELOAD:-5} ROWS=${ROWS:-60000} MODE=${MODE:-follow}
command -v hey >/dev/null || { echo "serve-soak: needs hey (apt-get install hey)" >&2; exit 1; }
cd "$ROOT" && go build -o "$DIR/psgraph" .
PSG="$DIR/psgraph"
[ -f "$DIR/ctr.tsv" ] || "$PSG" gen criteo -o "$DIR/ctr.tsv" --rows "$ROWS" --seed 1 2>/dev/null
sed "s|csv: data/ctr.tsv|csv: $DIR/ctr.tsv|" examples/ctr.yaml >"$DIR/ctr.yaml"
for s in 100 200; do
	[ -f "$DIR/ctr-$s.safetensors" ] || "$PSG" run --role local "$DIR/ctr.yaml" --steps $s --save "$DIR/ctr-$s.safetensors" --log-every 0 >/dev/null 2>&1
done
cp "$DIR/ctr-100.safetensors" "$DIR/served.safetensors"
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
lines = open(d + "/ctr.tsv").read().split("\n")[:100]
json.dump({"inputs": [{"name": "rows", "datatype": "BYTES", "shape": [100], "data": lines}]}, open(d + "/body.json", "w"))
PY
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
addr=127.0.0.1:$(port)
jobpids=""
if [ "$MODE" = follow ]; then
	rm -rf "$DIR/plan"
	"$PSG" split "$DIR/ctr.yaml" --trainers 2 --pservers 2 -o "$DIR/plan" >/dev/null
	export PSGRAPH_TOKEN=soak
	a0=127.0.0.1:$(port) a1=127.0.0.1:$(port)
	"$PSG" run --role pserver --index 0 --plan "$DIR/plan" --listen "$a0" >/dev/null 2>"$DIR/ps0.log" &
	jobpids="$jobpids $!"
	"$PSG" run --role pserver --index 1 --plan "$DIR/plan" --listen "$a1" >/dev/null 2>"$DIR/ps1.log" &
	jobpids="$jobpids $!"
	"$PSG" serve "$DIR/ctr.yaml" --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --listen "$addr" 2>"$DIR/serve.log" &
	pid=$!
	for i in 0 1; do
		"$PSG" run --role trainer --index $i --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --steps 100000000 --log-every 0 >/dev/null 2>"$DIR/t$i.log" &
		jobpids="$jobpids $!"
	done
else
	"$PSG" serve "$DIR/ctr.yaml" --init-from "$DIR/served.safetensors" --listen "$addr" 2>"$DIR/serve.log" &
	pid=$!
fi
trap 'kill $pid $jobpids 2>/dev/null || true' EXIT
until curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1; do sleep 0.05; done
hey -z "$DURATION" -c 4 -m POST -T application/json -D "$DIR/body.json" -o csv "http://$addr/v2/models/ctr/infer" >"$DIR/soak.csv" &
hey_pid=$!
: >"$DIR/rss.txt"
n=0
while kill -0 $hey_pid 2>/dev/null; do
	sleep "$RELOAD"
	n=$((n + 1))
	if [ "$MODE" = reload ]; then
		src=100; [ $((n % 2)) = 1 ] && src=200
		cp "$DIR/ctr-$src.safetensors" "$DIR/served.tmp" && mv "$DIR/served.tmp" "$DIR/served.safetensors"
		kill -HUP $pid
	fi
	[ $((n * RELOAD % 10)) -lt "$RELOAD" ] && awk '/VmRSS/ {print $2}' /proc/$pid/status >>"$DIR/rss.txt"
done
wait $hey_pid || true
version=$(curl -s "http://$addr/metrics" | awk '/^psgraph_serve_updates_applied_total/ {print $2}')
kill -TERM $pid
wait $pid
[ -n "$jobpids" ] && kill $jobpids 2>/dev/null
trap - EXIT
model_mib=$(python3 -c "import os; print(os.path.getsize('$DIR/served.safetensors') / 2**20)")
MODE=$MODE python3 - "$DIR" "$model_mib" "$version" "$RELOAD" <<'PY'
import csv, sys
d, model, version, reload = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rss = [int(l) / 1024 for l in open(d + "/rss.txt") if l.strip()]
rows = list(csv.DictReader(open(d + "/soak.csv")))
bad = sum(1 for r in rows if r["status-code"] != "200")
after = rss[min(len(rss) - 1, max(0, 60 // 10))]
print(f"psgraph serve soak ({__import__('os').environ.get('MODE', 'follow')}): {len(rows)} requests, {bad} failed, {version} updates applied")
print(f"RSS: {after:.0f} MiB after a minute, {rss[-1]:.0f} MiB at the end, {max(rss):.0f} MiB at most; bound {model:.0f} + 64 = {model + 64:.0f} MiB: {'ok' if max(rss) <= model + 64 else 'MISSED'}")
print(f"growth from the first minute to the end: {rss[-1] - after:+.0f} MiB")
PY
