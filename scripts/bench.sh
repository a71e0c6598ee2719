#!/usr/bin/env bash
# The benchmarks of docs/benchmarks.md, each run RUNS times, on servers of their own.
#
#   scripts/bench.sh [scorer|learner|extender|place|floor ...]
#   (default: scorer, learner, extender, place; `make bench`)
#
# Starts a Kafka broker and a durable Postgres (fsync and synchronous commits on) on
# ports of their own, below the kernel's ephemeral range, and stops them at the end.
# Each bench prints its ratios against a limit measured in the same run (raw consumer,
# orjson floor, trivial endpoint and pgbench); docs/benchmarks.md reports the median of
# three runs with the spread. Each scorer run follows an untimed one on its broker
# (warm_kafka). Logs go to $BENCH_OUT (.local/bench/<UTC time>/).
#
# Env: RUNS (3), BENCH_KAFKA_PORT (29396), BENCH_PG_PORT (25637), BENCH_OUT,
#      SCORER_LOAD_RATE (records/s for the second latency run; default 80 % of the
#      rate measured in that same run: --latency-of-max 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
KAFKA_PORT=${BENCH_KAFKA_PORT:-29396}
PG_PORT=${BENCH_PG_PORT:-25637}
OUT=${BENCH_OUT:-.local/bench/$(date -u +%Y%m%dT%H%M%SZ)}
PY=.venv/bin/python
BOOTSTRAP=127.0.0.1:$KAFKA_PORT
DATABASE_URL=postgresql://postgres@127.0.0.1:$PG_PORT/fairlane
export KAFKA_PORT PG_PORT
BENCHES=("$@")
[ ${#BENCHES[@]} -gt 0 ] || BENCHES=(scorer learner extender place)
mkdir -p "$OUT"

stop_servers() {
  scripts/kafka.sh down --purge >/dev/null 2>&1 || true
  scripts/postgres.sh down >/dev/null 2>&1 || true
}
trap stop_servers EXIT

fresh_kafka() { # every run on empty topics: earlier runs' records would be read again
  scripts/kafka.sh down --purge >/dev/null 2>&1 || true
  scripts/kafka.sh up >/dev/null
}

# A fresh broker's JVM compiles its hot paths during its first minutes: in the steady
# flow of the first scorer run after a start the broker took 0.61-0.67 cores, in the next
# runs on the same broker 0.40-0.41, then 0.23-0.34 (docs/benchmarks-history.md, "Scorer: the
# producer's batches and the fetch wait"). So one untimed scorer run first, that the
# measured run meets a broker closer to a production one's; its output goes to
# $OUT/warm-up.log only.
warm_kafka() {
  fresh_kafka
  $PY -m bench.scorer_throughput --bootstrap "$BOOTSTRAP" --latency-rate 1000 \
    --latency-s 15 >>"$OUT/warm-up.log" 2>&1 || true
}

FAILED=()
# "log name command...": the command's output to the terminal and to $OUT/name.log; a
# failed run is named at the end, and the other runs go on.
logged() {
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$OUT/$name.log"
  "$@" 2>&1 | tee -a "$OUT/$name.log" || FAILED+=("$name")
}

bench_scorer() {
  local i load
  logged scorer-state $PY -m bench.scorer_state
  logged scorer-state $PY -m bench.scorer_state --rss --nodes 125 --rounds 125
  for i in $(seq "$RUNS"); do
    warm_kafka
    logged scorer $PY -m bench.scorer_throughput --bootstrap "$BOOTSTRAP"
  done
  if [ -n "${SCORER_LOAD_RATE:-}" ]; then
    load=(--latency-rate "$SCORER_LOAD_RATE")
  else
    load=(--latency-of-max 0.8)
  fi
  for i in $(seq "$RUNS"); do
    warm_kafka
    logged scorer-load $PY -m bench.scorer_throughput --bootstrap "$BOOTSTRAP" \
      "${load[@]}" --latency-s 15
  done
}

# The speed learner (issue 27): progress records learned per second by one worker, on a
# broker warmed by one small untimed run.
bench_learner() {
  local i
  fresh_kafka
  $PY -m bench.learner_throughput --bootstrap "$BOOTSTRAP" --placements 200 --windows 5 \
    >>"$OUT/warm-up.log" 2>&1 || true
  for i in $(seq "$RUNS"); do
    logged learner $PY -m bench.learner_throughput --bootstrap "$BOOTSTRAP"
  done
}

bench_extender() {
  local i
  for i in $(seq "$RUNS"); do
    logged extender $PY -m bench.extender --calls 300
  done
}

bench_place() {
  local i
  PG_DURABLE=1 scripts/postgres.sh up >/dev/null
  for i in $(seq "$RUNS"); do
    fresh_kafka
    logged place $PY -m bench.scheduler_place --bootstrap "$BOOTSTRAP" \
      --database-url "$DATABASE_URL" --sizes 1000,10000,100000 --seconds 10 --extender-calls 0
  done
}

# Fractional jobs (issue 29): a quarter of one GPU each, at 1k and 10k GPUs, in process.
# Not in the default.
bench_share() {
  local i
  PG_DURABLE=1 scripts/postgres.sh up >/dev/null
  for i in $(seq "$RUNS"); do
    fresh_kafka
    logged share $PY -m bench.scheduler_place --bootstrap "$BOOTSTRAP" \
      --database-url "$DATABASE_URL" --sizes 1000,10000 --seconds 10 --extender-calls 0 \
      --held-share 0 --http-gpus 0 --share 0.25
  done
}

# The scheduler as it serves and with a decision that costs nothing, interleaved: what
# work on the decision could gain at most (bench/scheduler_floor.py). Not in the default.
bench_floor() {
  PG_DURABLE=1 scripts/postgres.sh up >/dev/null
  fresh_kafka
  logged floor $PY -m bench.scheduler_floor --bootstrap "$BOOTSTRAP" \
    --database-url "$DATABASE_URL" --gpus 1000 --runs "$RUNS"
}

for bench in "${BENCHES[@]}"; do
  case $bench in
    scorer | learner | extender | place | floor | share) "bench_$bench" ;;
    *)
      echo "bench.sh: unknown bench '$bench' (scorer, learner, extender, place, floor, share)" >&2
      exit 2
      ;;
  esac
done
echo "bench.sh: logs in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "bench.sh: failed runs: ${FAILED[*]}" >&2
  exit 1
fi
