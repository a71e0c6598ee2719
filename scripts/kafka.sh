#!/usr/bin/env bash
# Run a real single-node Apache Kafka (KRaft, combined broker+controller) for
# dev and tests, without Docker. The broker's jars come from, in this order:
#   1. $KAFKA_HOME, an unpacked Apache binary release (bin/, libs/), whatever its version;
#   2. the cache (.local/cache/kafka-$KAFKA_VERSION/libs) of an earlier download;
#   3. Maven Central, with Maven (mvn);
#   4. Apache's binary release (kafka_2.13-$KAFKA_VERSION.tgz, with curl or wget),
#      checked against the SHA-512 Apache publishes beside it.
# With none of these (no Maven, no network), one line says what to install.
# Idempotent: `up` on a running broker and `down` on a stopped one are no-ops.
#
#   scripts/kafka.sh up | down [--purge] | status | logs [-f] | libs
#
# `libs` prints the directory of the broker's jars (getting them as `up` would).
#
# Env: KAFKA_VERSION (3.9.1; 4.x works too), KAFKA_PORT (19092),
#      KAFKA_CONTROLLER_PORT (KAFKA_PORT+1), KAFKA_START_TIMEOUT (90 s),
#      KAFKA_HOME (an unpacked release; its version wins over KAFKA_VERSION),
#      KAFKA_MIRROR (where releases are: Apache's download site, then its archive),
#      KAFKA_HEAP_OPTS (-Xms256m -Xmx512m), KAFKA_OPTS (extra JVM flags),
#      KAFKA_PURGE=1 (same as down --purge),
#      FAIRLANE_STATE_DIR (<repo>/.local), FAIRLANE_CACHE_DIR (<repo>/.local/cache),
#      FAIRLANE_PYTHON (<repo>/.venv/bin/python, needs aiokafka; readiness probe).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KAFKA_VERSION=${KAFKA_VERSION:-3.9.1}
KAFKA_PORT=${KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}
KAFKA_START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}
STATE_DIR=${FAIRLANE_STATE_DIR:-$ROOT/.local}
CACHE_DIR=${FAIRLANE_CACHE_DIR:-$ROOT/.local/cache}
PY=${FAIRLANE_PYTHON:-$ROOT/.venv/bin/python}
INST=$STATE_DIR/kafka-$KAFKA_PORT
PID_FILE=$INST/kafka.pid
LOG=$INST/kafka.log
BOOTSTRAP=127.0.0.1:$KAFKA_PORT
CLUSTER_ID=RmFpcmxhbmVEZXZLYWZrYQ # fixed: any 22-char base64url of 16 bytes

die() { echo "kafka.sh: $*" >&2; exit 1; }
say() { echo "kafka.sh: $*"; }

# Pid of our broker if it is alive (and really is this instance's kafka), else
# fail. Zombies (exited, not yet reaped) have an empty cmdline, so count as dead.
running_pid() {
  [[ -f $PID_FILE ]] || return 1
  local pid
  pid=$(<"$PID_FILE")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  if [[ -r /proc/$pid/cmdline ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$INST/server.properties" || return 1
  fi
  echo "$pid"
}

KAFKA_MIRROR=${KAFKA_MIRROR:-https://downloads.apache.org/kafka https://archive.apache.org/dist/kafka}

# Sets LIBS to a directory holding the broker classpath (and KAFKA_VERSION to what is
# in it); downloads it once. Messages go to stderr: `libs` prints LIBS on stdout.
resolve_libs() {
  if [[ -n ${KAFKA_HOME:-} ]]; then
    local jar
    jar=$(find "$KAFKA_HOME/libs/" -maxdepth 1 -name 'kafka_2.1[23]-*.jar' ! -name '*-test*' \
      ! -name '*-sources*' ! -name '*-javadoc*' 2>/dev/null | head -n1 || true)
    [[ -n $jar ]] ||
      die "KAFKA_HOME=$KAFKA_HOME is not an unpacked Kafka release (no libs/kafka_2.13-<version>.jar)"
    LIBS=$KAFKA_HOME/libs
    KAFKA_VERSION=$(basename "$jar" .jar | sed 's/^kafka_2\.1[23]-//')
    say "Kafka $KAFKA_VERSION from KAFKA_HOME=$KAFKA_HOME" >&2
    return 0
  fi
  local dir=$CACHE_DIR/kafka-$KAFKA_VERSION
  LIBS=$dir/libs
  [[ -d $LIBS ]] && return 0
  mkdir -p "$dir"
  if command -v mvn >/dev/null; then
    fetch_with_maven "$dir"
  else
    fetch_release "$dir"
  fi
}

fetch_with_maven() { # $1 = the version's cache dir
  local dir=$1
  local logging
  if [[ ${KAFKA_VERSION%%.*} -ge 4 ]]; then
    logging="<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>"
  else # 3.x: the logging backend is compileOnly in kafka core, so add it ourselves
    logging="<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
    <dependency><groupId>ch.qos.reload4j</groupId><artifactId>reload4j</artifactId><version>1.2.25</version></dependency>"
  fi
  cat >"$dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.fairlane</groupId><artifactId>kafka-broker-libs</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    $logging
  </dependencies>
</project>
EOF
  say "downloading Kafka $KAFKA_VERSION jars with Maven into $LIBS ..." >&2
  local tmp
  tmp=$(mktemp -d "$dir/libs.tmp.XXXXXX")
  if ! mvn -q -B -f "$dir/pom.xml" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$tmp" >"$dir/mvn.log" 2>&1; then
    tail -n 30 "$dir/mvn.log" >&2; rm -rf "$tmp"
    die "Maven could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION (log: $dir/mvn.log)"
  fi
  # Atomic publish: a half-finished download is never mistaken for a cache hit.
  mv -T "$tmp" "$LIBS" 2>/dev/null || rm -rf "$tmp"
}

# Apache's binary release into the cache: the first mirror whose checksum file answers,
# the tarball checked against it, its libs/ published atomically as the cache's.
fetch_release() { # $1 = the version's cache dir
  local dir=$1 name=kafka_2.13-$KAFKA_VERSION get mirror url= tmp
  local install="install Maven (Debian: apt-get install maven) or set KAFKA_HOME to an unpacked $name.tgz"
  if command -v curl >/dev/null; then get=(curl -fsSL --connect-timeout 10 -o)
  elif command -v wget >/dev/null; then get=(wget -q --timeout=10 -O)
  else die "cannot get Kafka $KAFKA_VERSION: no Maven, no KAFKA_HOME, no curl or wget; $install"
  fi
  tmp=$(mktemp -d "$dir/release.tmp.XXXXXX")
  for mirror in $KAFKA_MIRROR; do
    if "${get[@]}" "$tmp/$name.tgz.sha512" "$mirror/$KAFKA_VERSION/$name.tgz.sha512" 2>/dev/null; then
      url=$mirror/$KAFKA_VERSION/$name.tgz; break
    fi
  done
  if [[ -z $url ]]; then
    rm -rf "$tmp"
    die "cannot get Kafka $KAFKA_VERSION: no Maven, no KAFKA_HOME, and no Apache mirror answered ($KAFKA_MIRROR); $install"
  fi
  say "no Maven: downloading Apache's binary release $url ..." >&2
  if ! "${get[@]}" "$tmp/$name.tgz" "$url"; then rm -rf "$tmp"; die "download of $url failed"; fi
  # Apache's .sha512 is `gpg --print-md` style (NAME: HEX in groups, over lines) or
  # sha512sum style (HEX  NAME): drop the name, keep the hex digits.
  local want got
  want=$(sed "s/$name\.tgz//g" "$tmp/$name.tgz.sha512" | tr -cd '0-9a-fA-F' | tr 'A-F' 'a-f')
  if command -v sha512sum >/dev/null; then got=$(sha512sum "$tmp/$name.tgz")
  else got=$(shasum -a 512 "$tmp/$name.tgz")
  fi
  got=${got%% *}
  if [[ ${#want} != 128 || $want != "$got" ]]; then
    rm -rf "$tmp"; die "$url does not match its published SHA-512; not used"
  fi
  tar -xzf "$tmp/$name.tgz" -C "$tmp"
  [[ -d $tmp/$name/libs ]] || { rm -rf "$tmp"; die "$url holds no $name/libs"; }
  # Atomic publish: a half-finished download is never mistaken for a cache hit.
  mv -T "$tmp/$name/libs" "$LIBS" 2>/dev/null || true
  rm -rf "$tmp"
}

write_config() {
  mkdir -p "$INST/data"
  cat >"$INST/server.properties" <<EOF
# Generated by scripts/kafka.sh (Kafka $KAFKA_VERSION); edits are overwritten on 'up'.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$INST/data
num.partitions=8
auto.create.topics.enable=false
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
num.io.threads=4
EOF
  if [[ ${KAFKA_VERSION%%.*} -ge 4 ]]; then
    printf '%s\n' share.coordinator.state.topic.replication.factor=1 \
      share.coordinator.state.topic.min.isr=1 >>"$INST/server.properties"
    cat >"$INST/log4j2.properties" <<'EOF'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.raftserver.name = kafka.server.KafkaRaftServer
logger.raftserver.level = INFO
EOF
    LOG_OPT=-Dlog4j2.configurationFile=$INST/log4j2.properties
  else
    cat >"$INST/log4j.properties" <<'EOF'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
EOF
    LOG_OPT=-Dlog4j.configuration=file:$INST/log4j.properties
  fi
}

wait_ready() { # $1 = broker pid
  "$PY" "$ROOT/scripts/kafka_ready.py" "$BOOTSTRAP" --timeout "$KAFKA_START_TIMEOUT" --pid "$1"
}

cmd_up() {
  command -v java >/dev/null || die "java not found: install a JDK 17+ (Debian: apt-get install openjdk-17-jre-headless)"
  mkdir -p "$INST"
  exec 9>"$INST/.lock"
  command -v flock >/dev/null && flock 9 # serialise concurrent 'up's of the same instance
  "$PY" -c 'import aiokafka' 2>/dev/null ||
    die "readiness probe needs aiokafka: '$PY' not usable; run 'uv sync' or set FAIRLANE_PYTHON"
  local pid
  if pid=$(running_pid); then
    wait_ready "$pid" >/dev/null || die "broker pid $pid is running but not ready; see $LOG"
    say "already running (pid $pid, Kafka $(<"$INST/version")); bootstrap $BOOTSTRAP; log $LOG"
    return 0
  fi
  local port
  for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      die "port $port is in use by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT)"
    fi
  done
  resolve_libs
  if [[ -f $INST/version && -n $(ls -A "$INST/data" 2>/dev/null) && $(<"$INST/version") != "$KAFKA_VERSION" ]]; then
    die "$INST/data was created by Kafka $(<"$INST/version"), not $KAFKA_VERSION; run '$0 down --purge' first"
  fi
  write_config
  echo "$KAFKA_VERSION" >"$INST/version"
  local heap extra java_opts
  read -ra heap <<<"${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
  read -ra extra <<<"${KAFKA_OPTS:-}"
  java_opts=("${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
    "$LOG_OPT" "-Dkafka.logs.dir=$INST/logs" "${extra[@]}" -cp "$LIBS/*")
  if ! java "${java_opts[@]}" kafka.tools.StorageTool format -t "$CLUSTER_ID" \
      -c "$INST/server.properties" --ignore-formatted >"$INST/format.log" 2>&1; then
    cat "$INST/format.log" >&2; die "kafka-storage format failed"
  fi
  [[ -f $LOG ]] && mv -f "$LOG" "$LOG.1"
  # setsid+nohup: the broker survives the calling shell/terminal; as we are not a
  # process-group leader, setsid execs in place so $! is the java pid. 9>&- keeps
  # the broker from inheriting (and holding forever) the 'up' lock.
  setsid nohup java "${java_opts[@]}" kafka.Kafka "$INST/server.properties" \
    >"$LOG" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
  say "starting Kafka $KAFKA_VERSION (pid $pid) on $BOOTSTRAP ..."
  if ! wait_ready "$pid"; then
    echo "---- last 30 lines of $LOG ----" >&2
    tail -n 30 "$LOG" >&2 || true
    KAFKA_PURGE=0 cmd_down >/dev/null # don't leave a half-started broker holding the ports
    die "Kafka did not become ready (timeout ${KAFKA_START_TIMEOUT}s or process exited)"
  fi
  say "running (pid $pid); bootstrap $BOOTSTRAP; log $LOG"
}

cmd_down() {
  local purge=${KAFKA_PURGE:-0} pid
  [[ ${1:-} == --purge ]] && purge=1
  if pid=$(running_pid); then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do running_pid >/dev/null || break; sleep 0.5; done
    if running_pid >/dev/null; then
      say "pid $pid ignored SIGTERM for 30 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    say "stopped (pid $pid)"
  else
    say "not running on port $KAFKA_PORT"
  fi
  rm -f "$PID_FILE"
  if [[ $purge == 1 ]]; then rm -rf "$INST/data" "$INST/version"; say "purged $INST/data"; fi
}

cmd_status() {
  local pid
  if pid=$(running_pid); then
    say "running (pid $pid); bootstrap $BOOTSTRAP; log $LOG"
  else
    say "not running on port $KAFKA_PORT"; exit 3
  fi
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down "${2:-}" ;;
  status) cmd_status ;;
  logs) shift; [[ -f $LOG ]] || die "no log at $LOG"; exec tail -n 100 "$@" "$LOG" ;;
  libs) resolve_libs; echo "$LIBS" ;;
  *) echo "usage: $0 {up|down [--purge]|status|logs [-f]|libs}" >&2; exit 2 ;;
esac
