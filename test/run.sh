#!/usr/bin/env bash
# Runs the test tiers with node's test runner on the compiled tests and ends
# with a plain "N passed, N failed" line. Usage: test/run.sh [unit|integration|e2e|contract|deploy|bench]...
# The bench tier is `berth bench --smoke` (each benchmark case a few times,
# no timing asserted), counted as one test so the harness never rots.
set -uo pipefail
cd "$(dirname "$0")/.."
tiers=("$@")
[ ${#tiers[@]} -gt 0 ] || tiers=(unit integration e2e contract deploy bench)
files=()
for t in "${tiers[@]}"; do
  [ -d "dist/test/$t" ] || continue
  while IFS= read -r f; do files+=("$f"); done < <(find "dist/test/$t" -name '*.test.js' | sort)
done
if [ ${#files[@]} -eq 0 ]; then
  echo "no compiled tests found under dist/test (${tiers[*]}); run 'make build' first" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
tap=$(mktemp)
trap 'rm -f "$tap"' EXIT
node --test --test-concurrency=2 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tap" \
  "${files[@]}"
status=$?
pass=$(grep -E '^# pass ' "$tap" | tail -1 | awk '{print $3}')
fail=$(grep -E '^# fail ' "$tap" | tail -1 | awk '{print $3}')
cancelled=$(grep -E '^# cancelled ' "$tap" | tail -1 | awk '{print $3}')
skipped=$(grep -E '^# skipped ' "$tap" | tail -1 | awk '{print $3}')
fail=$(( ${fail:-0} + ${cancelled:-0} ))
if [[ " ${tiers[*]} " == *" bench "* ]]; then
  echo "# bench smoke: bin/berth bench --smoke"
  if node bin/berth bench --smoke; then
    pass=$(( ${pass:-0} + 1 ))
  else
    fail=$(( fail + 1 ))
    [ "$status" -ne 0 ] || status=1
  fi
fi
if [ "${skipped:-0}" -gt 0 ]; then
  echo "${pass:-0} passed, ${fail} failed, ${skipped} skipped"
else
  echo "${pass:-0} passed, ${fail} failed"
fi
exit $status
