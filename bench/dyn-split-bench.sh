#!/usr/bin/env bash
# A 2x2 sync job of examples/ctr-dynamic.yaml (and with min_count 1, no
# ttl: every key a row) beside the same job with
# examples/ctr.yaml's fixed table (1M buckets, and 10M), started role by
# role on loopback so each process's peak RSS is measured (GNU time) and
# each pserver's summary (its dynamic shard's live rows) is kept; trainer 0
# saves the whole model (--save), so the pservers' RSS includes the end's
# pulls.
# Usage: bench/dyn-split-bench.sh [DIR] (default: a new temporary directory)
# Prints, per model: trainer-0's steps/s, each pserver's peak RSS and live
# rows, and the RSS bound 1.3 x live x (dim + state) x 4 B + 64 MiB.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$(mktemp -d)}
ROWS=${ROWS:-300000} STEPS=${STEPS:-600} BATCH=${BATCH:-256}
cd "$ROOT" && go build -o "$DIR/psgraph" .
PSG="$DIR/psgraph"
[ -f "$DIR/ctr.tsv" ] || "$PSG" gen criteo -o "$DIR/ctr.tsv" --rows "$ROWS" --vocab 2000000 --seed 1 >/dev/null
sed 's|csv: data/ctr-drift.tsv|csv: ctr.tsv|' examples/ctr-dynamic.yaml >"$DIR/dynamic.yaml"
sed 's|csv: data/ctr-drift.tsv|csv: ctr.tsv|; s|min_count: 2, ttl_steps: 2000|min_count: 1|' examples/ctr-dynamic.yaml >"$DIR/dynamic-min1.yaml"
sed 's|csv: data/ctr.tsv|csv: ctr.tsv|' examples/ctr.yaml >"$DIR/fixed-1M.yaml"
sed 's|csv: data/ctr.tsv|csv: ctr.tsv|; s|hash_buckets: 1000000|hash_buckets: 10000000|; s|\[1000000, 16\]|[10000000, 16]|' examples/ctr.yaml >"$DIR/fixed-10M.yaml"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for m in ${MODELS:-dynamic dynamic-min1 fixed-1M fixed-10M}; do
	rm -rf "$DIR/$m.plan"
	"$PSG" split "$DIR/$m.yaml" --trainers 2 --pservers 2 -o "$DIR/$m.plan" >/dev/null
	a0=127.0.0.1:$(port) a1=127.0.0.1:$(port)
	export PSGRAPH_TOKEN=bench
	for i in 0 1; do
		addr=$a0; [ $i = 1 ] && addr=$a1
		/usr/bin/time -f "%M %U %S" -o "$DIR/$m.ps$i.rss" "$PSG" run --role pserver --index $i --plan "$DIR/$m.plan" --listen "$addr" \
			>"$DIR/$m.ps$i.out" 2>"$DIR/$m.ps$i.err" &
	done
	for i in 0 1; do
		save=(); [ $i = 0 ] && save=(--save "$DIR/$m.safetensors") # the whole model, every shard pulled at the end
		/usr/bin/time -f "%M %U %S" -o "$DIR/$m.t$i.rss" "$PSG" run --role trainer --index $i --plan "$DIR/$m.plan" --pservers "$a0,$a1" \
			--steps "$STEPS" --batch "$BATCH" --log-every 0 "${save[@]}" >"$DIR/$m.t$i.out" 2>"$DIR/$m.t$i.err" &
	done
	wait
	python3 - "$DIR" "$m" <<'PY'
import json, sys
d, m = sys.argv[1], sys.argv[2]
last = lambda f: json.loads(open(f).read().strip().splitlines()[-1])
t0 = last(f"{d}/{m}.t0.out")
# GNU time's last line: peak RSS (KiB), user and system CPU seconds.
usage = lambda f: open(f).read().split()[-3:]
cpu = sum(float(u) + float(s) for f in ("t0", "t1", "ps0", "ps1") for _, u, s in [usage(f"{d}/{m}.{f}.rss")])
print(f"{m}: trainer-0 {t0['steps']} steps in {t0['seconds']:.1f} s = {t0['steps_per_s']:.1f} steps/s, auc {t0.get('auc')}; "
      f"CPU of the 4 processes {cpu:.1f} s = {1000 * cpu / t0['steps']:.1f} ms a step (start, init and save included)")
for i in (0, 1):
    rss = int(usage(f"{d}/{m}.ps{i}.rss")[0]) * 1024
    ps = last(f"{d}/{m}.ps{i}.out")
    live = ps.get("tables", {}).get("emb", {}).get("live_rows")
    line = f"  pserver-{i}: peak RSS {rss / 2**20:.1f} MiB"
    if live is not None:
        bound = 1.3 * live * (16 + 16) * 4 + 64 * 2**20
        line += f", {live} live rows, {ps['tables']['emb']['bytes'] / 2**20:.1f} MiB of table; bound 1.3 x {live} x 32 x 4 B + 64 MiB = {bound / 2**20:.1f} MiB: {'within' if rss <= bound else 'ABOVE'}"
    print(line)
PY
done
