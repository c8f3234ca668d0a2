#!/usr/bin/env bash
# What following a job costs, in CPU rather than wall time (issue 35):
#   bash bench/serve-cpu.sh [DIR]      (default DIR: a new temporary directory)
# A 2x2 job of examples/ctr.yaml (JOB_STEPS steps of 256 rows, TCP on
# loopback), in alternating runs without a replica and with one following
# it (psgraph serve --plan; MODES="without with load" adds runs where 4 hey
# clients send it requests of 100 rows). Each process's user+system CPU
# seconds come from its rusage (GNU time) or, for the replica, from
# /proc/PID/stat between its being ready and the job's end; printed as
# CPU milliseconds per job step, a figure that does not depend on how
# loaded the machine is, with trainer 0's steps/s beside it (and, for
# "load", the requests' p99 while following and after the job). PSG=BIN
# runs a binary given instead of building one (to compare). PROFILE=1
# also writes CPU profiles of pserver-0 and the replica to DIR (the last
# run of each mode): go tool pprof DIR/ps0-with.prof.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$(mktemp -d)}
ROWS=${ROWS:-60000} RUNS=${RUNS:-3} JOB_STEPS=${JOB_STEPS:-1500} MODES=${MODES:-without with} PROFILE=${PROFILE:-0}
. "$ROOT/bench/serve-setup.sh" # PSG, DIR/ctr.tsv, DIR/ctr.yaml, DIR/body.json, port
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rm -rf "$DIR/plan"
"$PSG" split "$DIR/ctr.yaml" --trainers 2 --pservers 2 -o "$DIR/plan" >/dev/null
export PSGRAPH_TOKEN=bench
HZ=$(getconf CLK_TCK)
: >"$DIR/cpu.txt"
job() { # job MODE: one 2x2 run; appends "mode steps/s ps0 ps1 t0 t1 replica" (CPU seconds) to cpu.txt
	local mode=$1 a0 a1 m0 sa prof0="" profr="" sampler=""
	a0=127.0.0.1:$(port) a1=127.0.0.1:$(port) sa=127.0.0.1:$(port)
	if [ "$PROFILE" = 1 ]; then prof0="--cpuprofile=$DIR/ps0-$mode.prof" profr="--cpuprofile=$DIR/replica-$mode.prof"; fi
	m0=127.0.0.1:$(port)
	/usr/bin/time -f "%U %S" -o "$DIR/ps0.time" "$PSG" run --role pserver --index 0 --plan "$DIR/plan" --listen "$a0" --metrics-addr "$m0" $prof0 >/dev/null 2>"$DIR/ps0.log" &
	local ps0=$!
	/usr/bin/time -f "%U %S" -o "$DIR/ps1.time" "$PSG" run --role pserver --index 1 --plan "$DIR/plan" --listen "$a1" >/dev/null 2>"$DIR/ps1.log" &
	local ps1=$! rpid="" r0=0 r1=0 heypid=""
	if [ "$mode" != without ]; then
		"$PSG" serve "$DIR/ctr.yaml" --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --listen "$sa" $profr 2>"$DIR/replica.log" &
		rpid=$!
		until curl -sf "http://$sa/v2/health/ready" >/dev/null 2>&1; do sleep 0.05; done
		r0=$(ticks $rpid)
	fi
	if [ "$mode" = sampled ]; then # the staleness sampler of serve-bench.sh, timed
		/usr/bin/time -f "%U %S" -o "$DIR/sampler.time" python3 - "$m0" "$sa" <<'PY' &
import sys, time, urllib.request, json
m0, sa = sys.argv[1:]
while True:
    try:
        for l in urllib.request.urlopen(f"http://{m0}/metrics", timeout=2).read().decode().split("\n"):
            pass
    except Exception:
        break
    urllib.request.urlopen(f"http://{sa}/v2/models/ctr", timeout=2).read()
    time.sleep(0.005)
PY
		sampler=$!
	fi
	if [ "$mode" = load ]; then
		hey -z 1000s -c 4 -m POST -T application/json -D "$DIR/body.json" -o csv "http://$sa/v2/models/ctr/infer" >"$DIR/follow.csv" &
		heypid=$!
	fi
	/usr/bin/time -f "%U %S" -o "$DIR/t1.time" "$PSG" run --role trainer --index 1 --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --steps "$JOB_STEPS" --log-every 0 >/dev/null 2>"$DIR/t1.log" &
	local t1=$!
	/usr/bin/time -f "%U %S" -o "$DIR/t0.time" "$PSG" run --role trainer --index 0 --plan "$DIR/plan" --pserver-endpoints "$a0,$a1" --steps "$JOB_STEPS" --log-every 0 >"$DIR/t0.out" 2>"$DIR/t0.log"
	wait $ps0 $ps1 $t1
	[ -n "$sampler" ] && { wait $sampler || true; echo "sampler CPU s: $(awk '{print $1 + $2}' "$DIR/sampler.time")" >&2; }
	if [ -n "$rpid" ]; then
		r1=$(ticks $rpid)
		if [ -n "$heypid" ]; then # the requests' p99 while following and once the job ended
			kill -INT $heypid
			wait $heypid || true
			hey -n 2000 -c 4 -m POST -T application/json -D "$DIR/body.json" -o csv "http://$sa/v2/models/ctr/infer" >"$DIR/steady.csv"
			python3 - "$DIR/follow.csv" "$DIR/steady.csv" >&2 <<'PY'
import csv, sys
def p99(f):
    lat = sorted(float(r["response-time"]) for r in csv.DictReader(open(f)) if r["status-code"] == "200")
    return lat[int(0.99 * (len(lat) - 1))] * 1000
print(f"request p99 while following {p99(sys.argv[1]):.2f} ms, steady {p99(sys.argv[2]):.2f} ms")
PY
		fi
		kill -TERM $rpid
		wait $rpid
	fi
	local sps
	sps=$(python3 -c "import json; print(json.loads(open('$DIR/t0.out').read().strip().split(chr(10))[-1])['steps_per_s'])")
	cpu() { awk '{print $1 + $2}' "$DIR/$1.time"; }
	echo "$mode $sps $(cpu ps0) $(cpu ps1) $(cpu t0) $(cpu t1) $(python3 -c "print(($r1 - $r0) / $HZ)")" >>"$DIR/cpu.txt"
}
for run in $(seq "$RUNS"); do
	for mode in $MODES; do
		job "$mode"
	done
done
JOB_STEPS=$JOB_STEPS python3 - "$DIR/cpu.txt" <<'PY'
import os, statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
steps = int(os.environ["JOB_STEPS"])
print(f"2x2 job of examples/ctr.yaml, {steps} steps; CPU ms per job step (user+system), medians of {len(runs)//len(set(r[0] for r in runs))} alternating runs")
print(f"{'mode':8s} {'steps/s':>8s} {'pserver-0':>10s} {'pserver-1':>10s} {'trainer-0':>10s} {'trainer-1':>10s} {'replica':>8s} {'pservers+replica':>17s}")
for mode in dict.fromkeys(r[0] for r in runs):
    rs = [list(map(float, r[1:])) for r in runs if r[0] == mode]
    med = [statistics.median(r[i] for r in rs) for i in range(6)]
    ms = [1000 * x / steps for x in med[1:]]
    print(f"{mode:8s} {med[0]:8.1f} {ms[0]:10.3f} {ms[1]:10.3f} {ms[2]:10.3f} {ms[3]:10.3f} {ms[4]:8.3f} {ms[0] + ms[1] + ms[4]:17.3f}")
PY
