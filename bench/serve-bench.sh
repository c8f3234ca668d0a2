#!/usr/bin/env bash
# psgraph serve's targets (issue 35), every figure in one command:
#   bash bench/serve-bench.sh [DIR]      (default DIR: a new temporary directory)
# examples/ctr.yaml is trained locally on ROWS generated rows; then, in
# alternating runs (predict, serve, predict, serve, ...) so a loaded
# machine weighs on both alike:
#   - psgraph predict over the ROWS rows: rows/s of the whole command;
#   - psgraph serve answering requests of 100 of those rows from 4
#     concurrent clients (hey, Debian's package; installed with apt-get
#     when missing and root): p99 latency and rows/s; then the same
#     requests while the model file is loaded again every 0.5 s: their p99
#     and failures;
# and the server's resident memory against the model file's bytes + 64 MiB.
# Then a 2x2 job of examples/ctr.yaml (JOB_STEPS steps of 256 rows, TCP on
# loopback), in alternating runs of five kinds: without a replica
# ("without"); with one following it (psgraph serve --plan, "with"):
# trainer 0's steps/s each way; with one followed and watched ("stale"):
# the staleness of every step, measured from outside, the time from
# pserver-0's psgraph_steps_total reaching a step to the replica's
# model_version reaching it (both polled every 5 ms); with one answering
# requests meanwhile ("load": hey, 4 clients, 100 rows a request): their
# p99 while it follows against its p99 once the job ended (steady); and
# both ("busy"): the staleness under those requests; and, to tell what
# following costs the requests from what the job's CPU does, a server of
# the model file not following the job, answering the same requests while
# the job runs beside it ("beside"). The watcher is kept
# out of the steps/s and p99 runs: its polls (Prometheus' /metrics of
# pserver-0 and the model's metadata, 200 times a second each) cost
# about as much CPU as the replica itself (bench/serve-cpu.sh
# MODES="with sampled" measures it), which on 2 cores came out of the
# job's steps/s and the requests' latency.
# Prints one line per target: the median figure over RUNS runs, the bound,
# and ok or MISSED. PSG=BIN runs a binary given instead of building one.
# A subset: PART1=0 skips the predict and serve runs; MODES="load beside" (MODES="" none: part 1 alone)
# runs only those kinds of job runs (default: all six). JOB_NICE=N runs the
# job's four processes under nice -n N (default 0: as the server).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$(mktemp -d)}
ROWS=${ROWS:-60000} STEPS=${STEPS:-300} RUNS=${RUNS:-3} REQUESTS=${REQUESTS:-3000} JOB_STEPS=${JOB_STEPS:-1500}
PART1=${PART1:-1} MODES=${MODES-without with stale load busy beside} JOB_NICE=${JOB_NICE:-0}
if ! command -v hey >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hey >/dev/null
	else
		echo "serve-bench: needs hey (apt-get install hey)" >&2
		exit 1
	fi
fi
. "$ROOT/bench/serve-setup.sh" # PSG, DIR/ctr.tsv, DIR/ctr.yaml, DIR/body.json, port
[ -f "$DIR/ctr.safetensors" ] || "$PSG" run --role local "$DIR/ctr.yaml" --steps "$STEPS" --save "$DIR/ctr.safetensors" --log-every 0 >/dev/null 2>&1
: >"$DIR/predict.txt"
: >"$DIR/serve.txt"
for run in $(seq "$RUNS"); do
	[ "$PART1" = 1 ] || break
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
	# the same requests while the model file is loaded again every 0.5 s
	# (the repository extension's load, as SIGHUP does)
	(while :; do curl -sf -X POST "http://$addr/v2/repository/models/ctr/load" >/dev/null || exit 1; sleep 0.5; done) &
	loader=$!
	hey -n "$REQUESTS" -c 4 -m POST -T application/json -D "$DIR/body.json" -o csv "http://$addr/v2/models/ctr/infer" >"$DIR/reload.csv"
	kill $loader; wait $loader || true
	loads=$(grep -c "loaded the model file" "$DIR/serve.log" || true)
	kill -TERM $pid
	wait $pid
	python3 - "$DIR/hey.csv" "$rss" "$DIR/reload.csv" "$loads" >>"$DIR/serve.txt" <<'PY'
import csv, sys
def figures(f):
    rows = list(csv.DictReader(open(f)))
    lat = sorted(float(r["response-time"]) for r in rows)
    bad = sum(1 for r in rows if r["status-code"] != "200")
    offsets = [float(r["offset"]) for r in rows]
    span = max(o + float(r["response-time"]) for o, r in zip(offsets, rows)) - min(offsets)
    return lat[int(0.99 * (len(lat) - 1))] * 1000, len(rows) * 100 / span, bad
p99, rps, bad = figures(sys.argv[1])
rp99, _, rbad = figures(sys.argv[3])
print(p99, rps, int(sys.argv[2]) / 1024, bad, rp99, rbad, sys.argv[4])
PY
done
# Part 2: following a 2x2 job.
rm -rf "$DIR/plan"
"$PSG" split "$DIR/ctr.yaml" --trainers 2 --pservers 2 -o "$DIR/plan" >/dev/null
export PSGRAPH_TOKEN=bench
: >"$DIR/job.txt"
job() { # job without|with|stale|load|busy: one 2x2 run, with a replica following (stale: watched; load: answering requests; busy: both); appends "mode steps/s staleness-p99 rss-MiB follow-p99 steady-p99" to job.txt
	local mode=$1 a0 a1 m0 sa
	a0=127.0.0.1:$(port) a1=127.0.0.1:$(port) m0=127.0.0.1:$(port) sa=127.0.0.1:$(port)
	nice -n "$JOB_NICE" "$PSG" run --role pserver --index 0 --plan "$DIR/plan" --listen "$a0" --metrics-addr "$m0" >/dev/null 2>"$DIR/ps0.log" &
	local ps0=$!
	nice -n "$JOB_NICE" "$PSG" run --role pserver --index 1 --plan "$DIR/plan" --listen "$a1" >/dev/null 2>"$DIR/ps1.log" &
	local ps1=$! rpid="" sampler=""
	if [ "$mode" = beside ]; then # a server of the model file, not following the job
		"$PSG" serve "$DIR/ctr.yaml" --init-from "$DIR/ctr.safetensors" --listen "$sa" 2>"$DIR/replica.log" &
		rpid=$!
		until curl -sf "http://$sa/v2/health/ready" >/dev/null 2>&1; do sleep 0.05; done
	elif [ "$mode" != without ]; then
		"$PSG" serve "$DIR/ctr.yaml" --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --listen "$sa" 2>"$DIR/replica.log" &
		rpid=$!
		until curl -sf "http://$sa/v2/health/ready" >/dev/null 2>&1; do sleep 0.05; done
	fi
	if [ "$mode" = stale ] || [ "$mode" = busy ]; then
		python3 - "$m0" "$sa" "$DIR/stale.txt" <<'PY' &
import sys, time, urllib.request, json
m0, sa, out = sys.argv[1:]
applied, served, t_end = {}, {}, None
def ps_step():
    for l in urllib.request.urlopen(f"http://{m0}/metrics", timeout=2).read().decode().split("\n"):
        if l.startswith("psgraph_steps_total"):
            return int(float(l.split()[-1]))
def rep_step():
    v = json.loads(urllib.request.urlopen(f"http://{sa}/v2/models/ctr", timeout=2).read())["versions"]
    return int(v[0]) if v else -1
last_ps = last_rep = -1
while True:
    now = time.monotonic()
    try:
        p = ps_step()
    except Exception:
        break  # the job ended: pserver-0 is gone
    r = rep_step()
    for k in range(last_ps + 1, p + 1):
        applied.setdefault(k, now)
    for k in range(last_rep + 1, r + 1):
        served.setdefault(k, now)
    last_ps, last_rep = max(last_ps, p), max(last_rep, r)
    time.sleep(0.005)
r = rep_step(); now = time.monotonic()
for k in range(last_rep + 1, r + 1):
    served.setdefault(k, now)
st = sorted(served[k] - applied[k] for k in applied if k in served and k > 0)
open(out, "w").write(str(st[int(0.99 * (len(st) - 1))] if st else float("nan")))
PY
		sampler=$!
	fi
	if [ "$mode" = load ] || [ "$mode" = busy ] || [ "$mode" = beside ]; then
		hey -z 1000s -c 4 -m POST -T application/json -D "$DIR/body.json" -o csv "http://$sa/v2/models/ctr/infer" >"$DIR/follow.csv" &
		heypid=$!
	fi
	nice -n "$JOB_NICE" "$PSG" run --role trainer --index 1 --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --steps "$JOB_STEPS" --log-every 0 >/dev/null 2>"$DIR/t1.log" &
	nice -n "$JOB_NICE" "$PSG" run --role trainer --index 0 --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --steps "$JOB_STEPS" --log-every 0 >"$DIR/t0.out" 2>"$DIR/t0.log"
	wait $ps0 $ps1
	local sps stale=nan rss=nan fp99=nan sp99=nan
	sps=$(python3 -c "import json,sys; print(json.loads(open('$DIR/t0.out').read().strip().split(chr(10))[-1])['steps_per_s'])")
	if [ -n "$sampler" ]; then
		wait $sampler || true
		stale=$(cat "$DIR/stale.txt")
	fi
	[ -n "$rpid" ] && rss=$(awk '/VmRSS/ {print $2/1024}' /proc/$rpid/status)
	[ "$mode" = busy ] && { kill -INT $heypid; wait $heypid || true; }
	if [ "$mode" = load ] || [ "$mode" = beside ]; then
		kill -INT $heypid; wait $heypid || true
		hey -n 2000 -c 4 -m POST -T application/json -D "$DIR/body.json" -o csv "http://$sa/v2/models/ctr/infer" >"$DIR/steady.csv"
		read -r fp99 sp99 < <(python3 - "$DIR/follow.csv" "$DIR/steady.csv" <<'PY'
import csv, sys
def p99(f):
    lat = sorted(float(r["response-time"]) for r in csv.DictReader(open(f)) if r["status-code"] == "200")
    return lat[int(0.99 * (len(lat) - 1))] * 1000 if lat else float("nan")
print(p99(sys.argv[1]), p99(sys.argv[2]))
PY
)
	fi
	[ -n "$rpid" ] && { kill -TERM $rpid; wait $rpid; }
	echo "$mode $sps $stale $rss $fp99 $sp99" >>"$DIR/job.txt"
}
for run in $(seq "$RUNS"); do
	for mode in $MODES; do
		job $mode
	done
done
[ -n "$MODES" ] || exit 0 # no job runs: nothing more to report
model_mib=$(python3 -c "import os; print(os.path.getsize('$DIR/ctr.safetensors') / 2**20)")
JOB_STEPS=$JOB_STEPS JOB_NICE=$JOB_NICE python3 - "$DIR" "$model_mib" <<'PY'
import os, statistics, sys
d, model = sys.argv[1], float(sys.argv[2])
def line(what, fig, bound, ok):
    print(f"{what:58s} {fig:>14s}   {bound:>22s}   {'ok' if ok else 'MISSED'}")
runs = [list(map(float, l.split())) for l in open(d + "/serve.txt")]
if runs:  # PART1
    pred = statistics.median(float(l) for l in open(d + "/predict.txt"))
    p99 = statistics.median(r[0] for r in runs)
    rps = statistics.median(r[1] for r in runs)
    rss = max(r[2] for r in runs)
    bad = sum(r[3] for r in runs)
    rp99 = statistics.median(r[4] for r in runs)
    rbad = sum(r[5] for r in runs)
    loads = sum(r[6] for r in runs)
    print(f"psgraph serve, examples/ctr.yaml, requests of 100 rows, 4 clients (hey); median of {len(runs)} alternating runs")
    line("request p99", f"{p99:.2f} ms", "<= 5 ms", p99 <= 5)
    line("throughput (serve rows/s / predict rows/s)", f"{rps:.0f}/{pred:.0f} = {rps/pred:.2f}x", ">= 0.7x", rps >= 0.7 * pred)
    line("requests failed", f"{bad:.0f}", "0", bad == 0)
    line(f"request p99 while reloading every 0.5 s / steady ({loads:.0f} loads)", f"{rp99:.2f}/{p99:.2f} ms = {rp99/p99:.2f}x", "(no bound)", True)
    line("  requests failed while reloading", f"{rbad:.0f}", "0", rbad == 0)
    line("server RSS (max over runs)", f"{rss:.0f} MiB", f"<= {model:.0f} + 64 MiB", rss <= model + 64)
jobs = [l.split() for l in open(d + "/job.txt")]
def med(mode, col):  # the median of a column over the runs of a kind; None without any (MODES)
    v = [float(j[col]) for j in jobs if j[0] == mode]
    return statistics.median(v) if v else None
without, wsps, lsps, ssps = med("without", 1), med("with", 1), med("load", 1), med("stale", 1)
stale, lstale = med("stale", 2), med("busy", 2)
rrss = [float(j[3]) for j in jobs if j[0] in ("with", "load", "stale", "busy")]
bp99, bsp99, fp99, sp99 = med("beside", 4), med("beside", 5), med("load", 4), med("load", 5)
nice = os.environ.get("JOB_NICE", "0")
print(f"following a 2x2 job of examples/ctr.yaml ({os.environ.get('JOB_STEPS', '1500')} steps{', the job at nice ' + nice if nice != '0' else ''}); median of {max(len([j for j in jobs if j[0] == m]) for m in set(j[0] for j in jobs))} runs of each kind, alternating")
if without and wsps:
    line("job steps/s with a replica / without", f"{wsps:.0f}/{without:.0f} = {wsps/without:.2f}x", ">= 0.95x", wsps >= 0.95 * without)
if without and ssps:
    line("  the same, watched for staleness / without", f"{ssps/without:.2f}x", "(the watcher's CPU)", True)
if stale is not None:
    line("staleness p99 (pserver-0 applied -> replica served)", f"{stale:.3f} s", "<= 1 s", stale <= 1)
if lstale is not None:
    line("  the same under 4 clients' requests", f"{lstale:.3f} s", "<= 1 s", lstale <= 1)
if without and lsps:
    line("  job steps/s under those requests / without", f"{lsps/without:.2f}x", "(the cores are shared)", True)
if fp99 is not None:
    line("request p99 while following / steady", f"{fp99:.2f}/{sp99:.2f} ms = {fp99/sp99:.2f}x", "<= 2x", fp99 <= 2 * sp99)
if bp99 is not None:
    line("  beside the job, not following it / steady (a file served)", f"{bp99:.2f}/{bsp99:.2f} ms = {bp99/bsp99:.2f}x", "(the job's CPU)", True)
if rrss:
    line("replica RSS (max over runs)", f"{max(rrss):.0f} MiB", f"<= {model:.0f} + 64 MiB", max(rrss) <= model + 64)
PY
