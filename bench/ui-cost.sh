#!/usr/bin/env bash
# The cost of millrace run --ui to the run (docs/ui.md; BENCHMARKS.md, "millrace run --ui: the
# page open"): the Python SDK echo (sdk/python/examples/echo.py) over RECORDS records (default
# 200,000), without --ui, with --ui and no page open, and with the page open in a headless
# Chromium on the pipeline view; ROUNDS rounds (default 3), the three alternated. The input is
# held back 6 s so that the page is open before the first record; records/s is over the run's
# elapsed time less those 6 s. Needs python3 and chromium (scripts/setup).
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-200000} rounds=${ROUNDS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/millrace" ./cmd/millrace
mkdir "$work/pyecho"
echo "pyecho --in in=x.v1 --out out=x.v1 -- python3 $PWD/sdk/python/examples/echo.py" >"$work/pyecho/action.conf"
python3 -c "
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({'key': 'k%d' % (i % 1000), 'payload': {'n': i, 's': 'x' * 40}}) + '\n')
" "$work/in.jsonl" "$records"
browser=$(command -v chromium)
[ -x /usr/lib/chromium/chromium ] && browser=/usr/lib/chromium/chromium # Debian's wrapper script would outlive a kill
one() {
  local mode=$1 err="$work/err.$1" flag="" pid cpid=""
  [ "$mode" != none ] && flag=--ui
  (sleep 6; cat "$work/in.jsonl") | "$work/millrace" run "$work/pyecho" --input - $flag >/dev/null 2>"$err" &
  pid=$!
  if [ "$mode" != none ]; then
    until grep -q "page is at" "$err"; do sleep 0.05; done
    if [ "$mode" = open ]; then
      "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$work/chrome" "$(grep -o 'http://[^ ]*/' "$err" | head -1)#graph" >/dev/null 2>&1 &
      cpid=$!
    fi
    until grep -q "has ended" "$err"; do sleep 0.1; done
    kill -INT $pid
  fi
  wait $pid
  if [ -n "$cpid" ]; then kill $cpid; wait $cpid 2>/dev/null || true; rm -rf "$work/chrome"; fi
  local s
  s=$(grep -o 'in [0-9.]*s$' "$err" | grep -o '[0-9.]*')
  echo "$mode: $records records in ${s}s, $(python3 -c "print(round($records / ($s - 6)))") records/s"
}
uptime
for _ in $(seq "$rounds"); do
  for mode in none closed open; do one $mode; done
done
uptime
