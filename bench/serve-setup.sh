# What bench/serve-bench.sh and bench/serve-cpu.sh share, sourced with
# ROOT (the checkout), DIR and ROWS set: PSG, the psgraph binary (built
# into DIR, or the one PSG names, to compare an older build); DIR/ctr.tsv,
# ROWS generated rows of the CTR example; DIR/ctr.yaml, examples/ctr.yaml
# reading them; DIR/body.json, a request of their first 100 rows; and
# port, a free loopback port. The working directory is left at ROOT.
if [ -n "${PSG:-}" ]; then
	PSG=$(realpath "$PSG")
	cd "$ROOT"
else
	cd "$ROOT" && go build -o "$DIR/psgraph" .
	PSG="$DIR/psgraph"
fi
[ -f "$DIR/ctr.tsv" ] || "$PSG" gen criteo -o "$DIR/ctr.tsv" --rows "$ROWS" --seed 1 2>/dev/null
sed "s|csv: data/ctr.tsv|csv: $DIR/ctr.tsv|" examples/ctr.yaml >"$DIR/ctr.yaml"
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
lines = open(d + "/ctr.tsv").read().split("\n")[:100]
json.dump({"inputs": [{"name": "rows", "datatype": "BYTES", "shape": [100], "data": lines}]}, open(d + "/body.json", "w"))
PY
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
