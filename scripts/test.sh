#!/usr/bin/env bash
# `make test`: the tests that need no server (tests/unit, tests/property, tests/contract)
# run at nice 19 beside the ones that start servers (tests/integration, tests/e2e), and
# the short chaos suite, on servers of its own, beside both.
#
# Why: on a 2-core machine the server half spends most of its wall time waiting — for a
# broker stopped 60 s, a throttled node's recovery window, a minute of live placements,
# processes starting — while the other half is CPU-bound and waits for nothing. Side by
# side the CPU-bound half fills the idle CPU; at nice 19 the scheduler hands the CPU to
# the server half's processes whenever they want it, so their timing stays what it is
# when they run alone. Each half's output is printed whole (the server half's as it
# runs, the other's after it), with its own summary.
#
# Arguments are pytest's, for both halves. With a test path among them, that path runs
# alone in one pytest, as `pytest ARGS` would. Exit: non-zero when either half fails;
# pytest's "no tests collected" (5) counts as a failure only when both collected none.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-.venv/bin/python}

no_tests() {
    echo "make test: pytest collected no tests" >&2
    exit 1
}

for arg in "$@"; do
    if [[ $arg != -* && -e ${arg%%::*} ]]; then  # a path: run just what was asked
        "$PY" -m pytest "$@"
        rc=$?
        [[ $rc -eq 5 ]] && no_tests
        exit "$rc"
    fi
done

log=$(mktemp "${TMPDIR:-/tmp}/fairlane-unit-tests.XXXXXX")
chaos_log=$(mktemp "${TMPDIR:-/tmp}/fairlane-chaos-tests.XXXXXX")
# Its tests wait for the CPU at nice 19, so their hang guard (pytest-timeout) is longer.
nice -n 19 "$PY" -m pytest tests/unit tests/property tests/contract --timeout=900 "$@" \
    >"$log" 2>&1 &
unit=$!
# The short chaos suite (~4 min, mostly outages held on purpose) runs on a stack of its
# own ports (FAIRLANE_CHAOS_*), so it goes beside the other server tests, not after them.
"$PY" -m pytest tests/e2e/test_chaos.py "$@" >"$chaos_log" 2>&1 &
chaos=$!
trap 'kill "$unit" "$chaos" 2>/dev/null; rm -f "$log" "$chaos_log"' EXIT

# e2e before integration, the order one pytest over tests/ had: the scorer's kill -9
# test leaves future-dated (never stale) scores on the shared broker, which the live
# evaluation would otherwise find as a foreign fleet (it refuses to run on one).
# --durations: where the server half's time goes (docs/architecture.md, "Testing").
"$PY" -m pytest tests/e2e tests/integration --ignore=tests/e2e/test_chaos.py --durations=20 "$@"
servers=$?
wait "$chaos"
chaotic=$?
wait "$unit"
serverless=$?
echo
echo "======== the short chaos suite (tests/e2e/test_chaos.py), beside the server tests ========"
cat "$chaos_log"
echo
echo "======== the tests that need no server (tests/unit, tests/property, tests/contract) ========"
cat "$log"

if [[ $servers -eq 5 && $chaotic -eq 5 && $serverless -eq 5 ]]; then
    no_tests
fi
for rc in "$servers" "$chaotic" "$serverless"; do
    if [[ $rc -ne 0 && $rc -ne 5 ]]; then
        exit "$rc"
    fi
done
