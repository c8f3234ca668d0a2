#!/usr/bin/env bash
# The wall time of `go test ./...` with a warm build cache (issue target:
# 75 s on 2 cores), test results not cached (-count=1), and the 10 slowest
# tests. Usage: bench/test-time.sh [checkout ...] (default: this one); with
# several, they run alternately, so load weighs on each alike.
set -euo pipefail
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=("$(cd "$(dirname "$0")/.." && pwd)")
for d in "${dirs[@]}"; do
  (cd "$d" && go test -count=1 -run '^$' ./... >/dev/null) # warm the build cache
done
for d in "${dirs[@]}"; do
  out=$(mktemp)
  start=$(date +%s.%N)
  rc=0
  (cd "$d" && go test -count=1 -json ./... >"$out" 2>&1) || rc=$?
  end=$(date +%s.%N)
  printf '%s: go test ./... %.1f s (exit %d; load %s)\n' "$d" "$(echo "$end - $start" | bc)" "$rc" "$(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$out" <<'PY'
import json, sys
tests, pkgs, failed = [], [], []
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    if d.get("Action") in ("pass", "fail") and "Elapsed" in d:
        if d.get("Test") and "/" not in d["Test"]:
            tests.append((d["Elapsed"], d["Package"].split("/psgraph/")[-1], d["Test"]))
            if d["Action"] == "fail":
                failed.append(d["Test"])
        elif not d.get("Test"):
            pkgs.append((d["Elapsed"], d["Package"].split("/psgraph/")[-1]))
for e, p in sorted(pkgs, reverse=True)[:5]:
    print(f"  package {p}: {e:.1f} s")
for e, p, t in sorted(tests, reverse=True)[:10]:
    print(f"  {p} {t}: {e:.1f} s")
if failed:
    print("  failed: " + " ".join(failed))
PY
  rm -f "$out"
done
