#!/usr/bin/env bash
# The whole local stack for `make run`: Kafka and Postgres (via their scripts), then the
# scorer, the scheduler, a simulated fleet and simulated jobs (scripts/demo_jobs.sh, through
# `fairlane run`) as background processes with logs and pid files under .local/. `up`
# waits until the scheduler is ready, prints where things are,
# and stays in the foreground: Ctrl-C stops what it started (`DETACH=1` returns instead).
# If `up` fails half-way, it stops what it had started itself (servers and services that
# were already running before it are left alone) and exits non-zero.
#
#   scripts/stack.sh up | down | status
#
# Env: FAIRLANE_NODES (8 simulated nodes), FAIRLANE_GPUS_PER_NODE (8), FAIRLANE_SLOW_FRACTION
#      (0.1 of the GPUs slow under compute-bound jobs, unseen by NVML), FAIRLANE_DEMO_JOBS
#      (3 simulated jobs at a time, 0: none), FAIRLANE_DEMO_SHARE_JOBS (2 more, each
#      holding 0.3 of one GPU, 0: none),
#      FAIRLANE_INTERVAL_S (5, the demo's collection interval), FAIRLANE_PORT (8080),
#      KAFKA_PORT (19092), PG_PORT (25432), FAIRLANE_STATE_DIR (<repo>/.local),
#      READY_TIMEOUT (180 s), DETACH (0).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=${FAIRLANE_STATE_DIR:-$ROOT/.local}
RUN_DIR=$STATE_DIR/run
LOG_DIR=$STATE_DIR/logs
BIN=$ROOT/.venv/bin
SERVICES=(scorer scheduler agent jobs)

# Default ports stay below 32768: Linux lends 32768-60999 to outgoing connections, and a
# listener there can find its port briefly taken ("Address already in use").
export KAFKA_PORT=${KAFKA_PORT:-19092} PG_PORT=${PG_PORT:-25432}
export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$KAFKA_PORT
export FAIRLANE_INTERVAL_S=${FAIRLANE_INTERVAL_S:-5}
export FAIRLANE_HEARTBEAT_S=${FAIRLANE_HEARTBEAT_S:-15}
export FAIRLANE_STALE_AFTER_S=${FAIRLANE_STALE_AFTER_S:-45}
# The demo's admin token: random per state dir unless given, kept so restarts reuse it.
TOKEN_FILE=$STATE_DIR/run/admin-token
# The cluster key ring: the simulated fleet signs its samples with it, the scorer verifies
# them (docs/security.md, "Node identity"). Made once per state dir, like the token.
KEY_RING_FILE=${FAIRLANE_SAMPLE_KEY_RING_FILE:-$STATE_DIR/run/key-ring}
API_PORT=${FAIRLANE_PORT:-8080}
API=http://127.0.0.1:$API_PORT

say() { echo "stack.sh: $*" >&2; }
die() { say "$*"; exit 1; }

is_running() { [[ -f $RUN_DIR/$1.pid ]] && kill -0 "$(cat "$RUN_DIR/$1.pid")" 2>/dev/null; }

# What this `up` started itself, in order: stopped again if `up` fails half-way.
STARTED=()
UP_DONE=0

start() { # name command...
  local name=$1; shift
  if is_running "$name"; then say "$name already running"; return; fi
  nohup "$@" >"$LOG_DIR/$name.log" 2>&1 &
  echo $! >"$RUN_DIR/$name.pid"
  STARTED+=("$name")
  say "started $name (pid $!), log $LOG_DIR/$name.log"
}

start_server() { # kafka|postgres: start it unless it runs already; stdout is the script's
  local name=$1
  if "$ROOT/scripts/$name.sh" status >/dev/null 2>&1; then
    "$ROOT/scripts/$name.sh" up
  else
    STARTED+=("$name")
    "$ROOT/scripts/$name.sh" up
  fi
}

undo_partial_up() {
  local rc=$?
  ((UP_DONE == 1 || ${#STARTED[@]} == 0)) && return
  say "start failed; stopping what this run started: ${STARTED[*]}"
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
    case ${STARTED[i]} in
      kafka | postgres) "$ROOT/scripts/${STARTED[i]}.sh" down || true ;;
      *) stop_service "${STARTED[i]}" || true ;;
    esac
  done
  exit "$rc"
}

stop_service() {
  local name=$1 pid
  [[ -f $RUN_DIR/$name.pid ]] || return 0
  pid=$(cat "$RUN_DIR/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
    say "stopped $name"
  fi
  rm -f "$RUN_DIR/$name.pid"
}

wait_ready() {
  local deadline=$((SECONDS + ${READY_TIMEOUT:-180}))
  until curl -fsS "$API/readyz" >/dev/null 2>&1; do
    for name in "${SERVICES[@]}"; do
      is_running "$name" || { tail -n 30 "$LOG_DIR/$name.log" >&2; die "$name exited"; }
    done
    ((SECONDS < deadline)) || die "scheduler not ready: $(curl -s "$API/readyz")"
    sleep 1
  done
}

up() {
  [[ -x $BIN/python ]] || die "no Python environment: run \`make setup\` first"
  mkdir -p "$RUN_DIR" "$LOG_DIR"
  if [[ -z ${FAIRLANE_ADMIN_TOKEN:-} ]]; then
    [[ -s $TOKEN_FILE ]] || (umask 077 && "$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(24))' >"$TOKEN_FILE")
    FAIRLANE_ADMIN_TOKEN=$(cat "$TOKEN_FILE")
  fi
  export FAIRLANE_ADMIN_TOKEN
  if [[ ! -s $KEY_RING_FILE ]]; then
    (umask 077 && printf 'local-1 %s\n' "$("$BIN/python" -c 'import secrets; print(secrets.token_hex(24))')" >"$KEY_RING_FILE")
  fi
  export FAIRLANE_SAMPLE_KEY_RING_FILE=$KEY_RING_FILE
  trap undo_partial_up EXIT
  start_server kafka
  # Not in a command substitution: STARTED must be updated in this shell.
  start_server postgres >"$RUN_DIR/postgres.out"
  DATABASE_URL=$(sed -n 's/^DATABASE_URL=//p' "$RUN_DIR/postgres.out")
  [[ -n $DATABASE_URL ]] || die "postgres.sh printed no DATABASE_URL"
  export DATABASE_URL
  "$BIN/python" -m fairlane_runtime.kafka --bootstrap "$KAFKA_BOOTSTRAP_SERVERS"
  start scorer "$BIN/fairlane-scorer" --data-dir "$STATE_DIR/scorer-data"
  start scheduler "$BIN/fairlane-scheduler" --port "$API_PORT"
  start agent "$BIN/fairlane-agent" --nodes "${FAIRLANE_NODES:-8}" \
    --gpus-per-node "${FAIRLANE_GPUS_PER_NODE:-8}" --metrics-port 0 \
    --slow-fraction "${FAIRLANE_SLOW_FRACTION:-0.1}" --hidden-speeds-file "$RUN_DIR/hidden-speeds.json"
  start jobs env FAIRLANE_SCHEDULER_URL="$API" FAIRLANE_TOKEN="$FAIRLANE_ADMIN_TOKEN" \
    FAIRLANE_DEMO_SPEEDS="$RUN_DIR/hidden-speeds.json" "$ROOT/scripts/demo_jobs.sh"
  wait_ready
  UP_DONE=1
  cat <<INFO

Fairlane is running ($(curl -s "$API/readyz")).
  API           $API          (OpenAPI docs: $API/docs)
  dashboard     $API/dashboard   (sign in with the admin token in $TOKEN_FILE)
  scorer        http://127.0.0.1:6067/metrics
  Kafka         $KAFKA_BOOTSTRAP_SERVERS      Postgres $DATABASE_URL
  logs          $LOG_DIR/{scorer,scheduler,agent,jobs}.log
  jobs          ${FAIRLANE_DEMO_JOBS:-3} simulated at a time through \`fairlane run\` (scripts/demo_jobs.sh),
                and ${FAIRLANE_DEMO_SHARE_JOBS:-2} holding a share of one GPU each;
                the slow GPUs' hidden speeds are in $RUN_DIR/hidden-speeds.json

Place a job (admin token in $TOKEN_FILE):
  curl -s -X POST $API/v1/placements -H "Authorization: Bearer \$(cat $TOKEN_FILE)" \\
       -H 'content-type: application/json' -d '{"job_id": "demo-$(date +%s)", "gpus_per_node": 4}'

INFO
  if [[ ${DETACH:-0} == 1 ]]; then say "detached; stop with \`make stop\`"; return; fi
  trap 'down; exit 0' INT TERM
  say "Ctrl-C stops everything"
  while true; do sleep 1; done
}

down() {
  for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do stop_service "${SERVICES[i]}"; done
  "$ROOT/scripts/kafka.sh" down
  "$ROOT/scripts/postgres.sh" down
}

status() {
  local rc=0
  for name in "${SERVICES[@]}"; do
    if is_running "$name"; then echo "$name: running"; else echo "$name: stopped"; rc=3; fi
  done
  curl -s "$API/readyz" && echo
  return $rc
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up | down | status" >&2; exit 2 ;;
esac
