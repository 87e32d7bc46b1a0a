#!/usr/bin/env bash
# Runs the test tiers with node's test runner on the compiled tests and ends
# with a plain "N passed, N failed" line. Usage: test/run.sh [unit|integration|e2e|contract|isolation|deploy|bench|FILE.test.js]...
# The bench tier is `berth bench --smoke` (each benchmark case a few times,
# no timing asserted), counted as one test so the harness never rots.
#
# The run has a marker (BERTH_TEST_RUN, inherited by every process the tests
# start) and a temp directory of its own (TMPDIR); at the end whatever still
# carries the marker, lies in that directory, or is a container mounting it
# is a leftover, and the run fails (test/support/leftover-check.ts). Skipped
# tests are listed with their reasons.
set -uo pipefail
cd "$(dirname "$0")/.."
tiers=("$@")
[ ${#tiers[@]} -gt 0 ] || tiers=(unit integration e2e contract isolation deploy bench)
files=()
for t in "${tiers[@]}"; do
  if [[ $t == *.test.js ]]; then
    files+=("$t")
    continue
  fi
  [ -d "dist/test/$t" ] || continue
  while IFS= read -r f; do files+=("$f"); done < <(find "dist/test/$t" -name '*.test.js' | sort)
done
if [ ${#files[@]} -eq 0 ]; then
  echo "no compiled tests found under dist/test (${tiers[*]}); run 'make build' first" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
# Short, because Unix socket paths under it must stay below 108 bytes.
run_dir=$(mktemp -d /tmp/bt.XXXXXX)
export BERTH_TEST_RUN=${run_dir##*/} BERTH_TEST_RUN_DIR=$run_dir TMPDIR=$run_dir
# The apptainer double's exported root filesystems are a cache meant to outlive runs.
export APPTAINER_DOUBLE_ROOTFS=${APPTAINER_DOUBLE_ROOTFS:-/tmp/berth-apptainer-double-rootfs}
started_ms=$(($(date +%s) * 1000))
tap=$run_dir/.tap
node dist/test/support/leftover-check.js watch "$run_dir/.other-runs" &
watcher=$!
trap 'kill "$watcher" 2>/dev/null' EXIT
node --test --test-concurrency=2 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tap" \
  "${files[@]}"
status=$?
if [ ! -s "$tap" ]; then
  # node refused before running anything (a file that does not exist, a bad flag): nothing passed.
  rm -rf "$run_dir"
  echo "0 passed, 1 failed"
  exit 1
fi
pass=$(grep -E '^# pass ' "$tap" | tail -1 | awk '{print $3}')
fail=$(grep -E '^# fail ' "$tap" | tail -1 | awk '{print $3}')
cancelled=$(grep -E '^# cancelled ' "$tap" | tail -1 | awk '{print $3}')
skipped=$(grep -E '^# skipped ' "$tap" | tail -1 | awk '{print $3}')
fail=$(( ${fail:-0} + ${cancelled:-0} ))
if [ "${skipped:-0}" -gt 0 ]; then
  echo "# skipped, with their reasons:"
  grep -E '^ *ok [0-9]+ - .* # SKIP' "$tap" | sed -E 's/^ *ok [0-9]+ - /#   /'
fi
if [[ " ${tiers[*]} " == *" bench "* ]]; then
  echo "# bench smoke: bin/berth bench --smoke"
  # The bench finds the test doubles it measures against through these (services/cli/bench/test-doubles.ts).
  if BERTH_BENCH_STANDINS=dist/test/standins/main.js BERTH_BENCH_APPTAINER=test/fixtures/apptainer-double/apptainer \
    node bin/berth bench --smoke; then
    pass=$(( ${pass:-0} + 1 ))
  else
    fail=$(( fail + 1 ))
    [ "$status" -ne 0 ] || status=1
  fi
fi
kill "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
if [ "$fail" -gt 0 ]; then
  # Again at the end, where a CI log's tail shows it: each failing test with its error (the TAP diagnostics).
  echo "# failed, with their errors:"
  awk '/^ *not ok [0-9]+ - / { match($0, /^ */); end = sprintf("%" (RLENGTH + 2) "s", "") "..."; on = 1; print; next }
       on { print; if ($0 == end) on = 0 }' "$tap" | grep -vE '^ *(duration_ms|type|location):' | head -n 150
fi
echo "# leftovers: bin/berth's tests must leave no process, file, container, network or volume behind"
if node dist/test/support/leftover-check.js check "$started_ms" "$run_dir/.other-runs"; then
  pass=$(( ${pass:-0} + 1 ))
  rm -rf "$run_dir"
else
  fail=$(( fail + 1 ))
  [ "$status" -ne 0 ] || status=1
  echo "# the run's temp directory is kept for a look: $run_dir"
fi
if [ "${skipped:-0}" -gt 0 ]; then
  echo "${pass:-0} passed, ${fail} failed, ${skipped} skipped"
else
  echo "${pass:-0} passed, ${fail} failed"
fi
exit $status
