#!/usr/bin/env bash
# Run a throwaway PostgreSQL cluster for dev and tests, without Docker or
# systemd, from the distribution's server binaries (Debian: /usr/lib/postgresql/
# <major>/bin, installed with apt-get when missing and we are root). Tuned for
# speed, not durability (fsync off); trust auth, listening on 127.0.0.1 only.
# Idempotent: `up` on a running cluster and `down` on a stopped one are no-ops.
#
#   scripts/postgres.sh up | down [--purge] | status
#
# `up` prints DATABASE_URL=... on stdout (messages go to stderr), so
#   export "$(scripts/postgres.sh up)"   works.
# Env: PG_PORT (25432), PG_DATABASE (fairlane), PG_START_TIMEOUT (60 s),
#      PG_PURGE=1 (same as down --purge), FAIRLANE_STATE_DIR (<repo>/.local),
#      PG_DURABLE=1 (fsync and synchronous commits on, for benchmarks).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_PORT=${PG_PORT:-25432} # below 32768: the kernel's ephemeral range starts there
PG_DATABASE=${PG_DATABASE:-fairlane}
PG_START_TIMEOUT=${PG_START_TIMEOUT:-60}
STATE_DIR=${FAIRLANE_STATE_DIR:-$ROOT/.local}
LINK=$STATE_DIR/postgres-$PG_PORT # the cluster dir (or a symlink to it, see prepare_dir)
URL=postgresql://postgres@127.0.0.1:$PG_PORT/$PG_DATABASE
IS_ROOT=0; [[ $(id -u) == 0 ]] && IS_ROOT=1

die() { echo "postgres.sh: $*" >&2; exit 1; }
say() { echo "postgres.sh: $*" >&2; }

# initdb, postgres and pg_ctl refuse to run as root: as root, use the `postgres`
# OS user (cd / so it never starts in a directory it cannot read).
as_pg() {
  if [[ $IS_ROOT == 1 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# Sets PG_BIN to the bin dir of the highest installed major version.
# `find_bin check` only reports (status 1) instead of installing or dying.
find_bin() {
  local ctls=()
  shopt -s nullglob; ctls=(/usr/lib/postgresql/*/bin/pg_ctl); shopt -u nullglob
  if [[ ${#ctls[@]} == 0 ]]; then
    [[ ${1:-} == check ]] && return 1
    if [[ $IS_ROOT == 1 ]] && command -v apt-get >/dev/null; then
      # Note: the Debian package may also create (and try to start) its own
      # `main` cluster on port 5432; we leave that one alone.
      say "installing PostgreSQL with apt-get (postgresql package) ..."
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      shopt -s nullglob; ctls=(/usr/lib/postgresql/*/bin/pg_ctl); shopt -u nullglob
    fi
    [[ ${#ctls[@]} -gt 0 ]] ||
      die "PostgreSQL server not found in /usr/lib/postgresql/*/bin; install it (Debian: apt-get install postgresql)"
  fi
  PG_BIN=$(dirname "$(printf '%s\n' "${ctls[@]}" | sort -V | tail -n1)")
}

# Sets INST to the real cluster dir if it exists (never creates anything).
resolve_inst() {
  INST=
  [[ -e $LINK ]] || return 1
  INST=$(readlink -f "$LINK")
  [[ -d $INST/data ]]
}

# Creates the cluster dir. Placement: as root, the server runs as `postgres`,
# which must be able to traverse every parent directory; a repo under /root or
# a 0700 home is not traversable, and chmod-ing a user's home is too intrusive.
# Unix socket paths are also limited to ~107 bytes. So when `postgres` cannot
# reach $FAIRLANE_STATE_DIR or the socket path would be too long, the cluster
# lives in a fresh mktemp dir under /tmp (unpredictable name, so no symlink
# races) and $FAIRLANE_STATE_DIR/postgres-$PG_PORT is a symlink to it. If /tmp
# was wiped (reboot), the dangling link is replaced by a fresh cluster.
prepare_dir() {
  [[ -L $LINK && ! -d $LINK ]] && rm -f "$LINK"
  if [[ ! -e $LINK ]]; then
    mkdir -p "$STATE_DIR"
    local sock="$LINK/.s.PGSQL.$PG_PORT"
    local why=
    ((${#sock} > 100)) && why="socket path $sock is too long"
    [[ $IS_ROOT == 1 ]] && ! as_pg test -x "$STATE_DIR" && why="user postgres cannot traverse $STATE_DIR"
    if [[ -n $why ]]; then
      ln -s "$(mktemp -d "/tmp/fairlane-pg-$PG_PORT.XXXXXX")" "$LINK"
      say "note: cluster lives in $(readlink "$LINK") ($why)"
    else
      mkdir "$LINK"
    fi
  fi
  INST=$(readlink -f "$LINK")
  [[ $INST != *"'"* ]] || die "cluster path must not contain a single quote: $INST"
  if [[ $IS_ROOT == 1 ]]; then chown postgres:postgres "$INST"; fi
  chmod 700 "$INST"
}

is_running() { [[ -n ${INST:-} && -d $INST/data ]] && as_pg "$PG_BIN/pg_ctl" -D "$INST/data" status >/dev/null 2>&1; }

psql_pg() { "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres "$@"; }

ensure_db() {
  local exists
  exists=$(psql_pg -d postgres -tA -v db="$PG_DATABASE" <<<"SELECT 1 FROM pg_database WHERE datname = :'db'") ||
    die "cannot query 127.0.0.1:$PG_PORT; see $INST/postgres.log"
  if [[ $exists != 1 ]]; then
    "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres -- "$PG_DATABASE"
    say "created database $PG_DATABASE"
  fi
}

cmd_up() {
  find_bin
  prepare_dir
  exec 9>"$INST/.lock"
  command -v flock >/dev/null && flock 9 # serialise concurrent 'up's
  local major=${PG_BIN%/bin}; major=${major##*/}
  # Already running? Wait while it is still starting (or, after a crash, until
  # the dead postmaster's pid is reaped and pg_ctl no longer reports it).
  local i
  for ((i = 0; i < PG_START_TIMEOUT * 2; i++)); do
    is_running || break
    if "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
      ensure_db
      say "already running (PostgreSQL $(<"$INST/data/PG_VERSION")) on 127.0.0.1:$PG_PORT; log $INST/postgres.log"
      echo "DATABASE_URL=$URL"; return 0
    fi
    sleep 0.5
  done
  ! is_running || die "server process exists but does not accept connections; see $INST/postgres.log"
  if [[ ! -f $INST/data/PG_VERSION ]]; then
    rm -rf "$INST/data"
    if ! as_pg "$PG_BIN/initdb" -D "$INST/data" -U postgres --auth=trust -E UTF8 \
        --locale=C.UTF-8 --no-sync >"$INST/initdb.log" 2>&1; then
      cat "$INST/initdb.log" >&2; die "initdb failed"
    fi
  elif [[ $(<"$INST/data/PG_VERSION") != "$major" ]]; then
    die "$INST/data is PostgreSQL $(<"$INST/data/PG_VERSION"), binaries are $major; run '$0 down --purge' first"
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$PG_PORT") 2>/dev/null; then
    die "port $PG_PORT is in use by another process (set PG_PORT)"
  fi
  local opts="-c listen_addresses=127.0.0.1 -p $PG_PORT -k '$INST' -c max_connections=200"
  if [[ ${PG_DURABLE:-0} == 1 ]]; then # benchmarks: commits really reach the disk
    opts+=" -c fsync=on -c synchronous_commit=on -c full_page_writes=on"
  else
    opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  fi
  if ! as_pg "$PG_BIN/pg_ctl" -D "$INST/data" -l "$INST/postgres.log" -w -t "$PG_START_TIMEOUT" \
      -o "$opts" start >"$INST/pg_ctl.log" 2>&1 9>&-; then
    cat "$INST/pg_ctl.log" >&2
    echo "---- last 30 lines of $INST/postgres.log ----" >&2
    tail -n 30 "$INST/postgres.log" >&2 || true
    die "PostgreSQL did not start"
  fi
  ensure_db
  say "running (PostgreSQL $major) on 127.0.0.1:$PG_PORT; log $INST/postgres.log"
  echo "DATABASE_URL=$URL"
}

cmd_down() {
  local purge=${PG_PURGE:-0}
  [[ ${1:-} == --purge ]] && purge=1
  if resolve_inst && find_bin check && is_running; then
    as_pg "$PG_BIN/pg_ctl" -D "$INST/data" -m fast -w -t 60 stop >/dev/null
    say "stopped (port $PG_PORT)"
  else
    say "not running on port $PG_PORT"
  fi
  if [[ $purge == 1 && -e $LINK ]]; then
    INST=$(readlink -f "$LINK")
    rm -rf "$INST" "$LINK"
    say "purged $INST"
  fi
}

cmd_status() {
  if resolve_inst && find_bin check && is_running; then
    say "running on 127.0.0.1:$PG_PORT; log $INST/postgres.log"
    echo "DATABASE_URL=$URL"
  else
    say "not running on port $PG_PORT"; exit 3
  fi
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down "${2:-}" ;;
  status) cmd_status ;;
  *) echo "usage: $0 {up|down [--purge]|status}" >&2; exit 2 ;;
esac
