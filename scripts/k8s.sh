#!/usr/bin/env bash
# A local Kubernetes control plane for tests: etcd + kube-apiserver + kube-scheduler on
# loopback, no kubelet (tests create Nodes and ResourceSlices through the API).
#
#   scripts/k8s.sh build           # once: build the pinned release from its Go modules
#   scripts/k8s.sh up | down | env | status
#
# build: k8s.io/kubernetes $K8S_VERSION and etcd $ETCD_VERSION from the Go module proxy
# (staging replaces pointed at the published k8s.io/* modules of the same release); the
# binaries are cached under ${XDG_CACHE_HOME:-~/.cache}/fairlane/k8s/<versions>/, outside
# the clone, so later runs and fresh CI clones reuse them. First build: ~10 min on 2 cores.
# up: etcd + kube-apiserver (self-signed CA and serving certificate from openssl, a static
# token file, RBAC authorization) + kube-scheduler, configured with
# deploy/kube-scheduler/kube-scheduler-config.yaml with its extender pointed at
# $FAIRLANE_EXTENDER_URL. Prints KUBE_API_URL=, KUBE_TOKEN=, KUBE_CA_FILE= and
# KUBECONFIG= on stdout (`env` prints them again for a running plane).
# Env: K8S_ETCD_PORT (26379), K8S_API_PORT (26443), K8S_SCHEDULER_PORT (26259),
#      FAIRLANE_EXTENDER_URL (http://127.0.0.1:8081/v1/extender), K8S_START_TIMEOUT (90 s),
#      FAIRLANE_STATE_DIR (<repo>/.local).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
CACHE=${FAIRLANE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fairlane/k8s/$K8S_VERSION-etcd-$ETCD_VERSION}
BINARIES=(etcd kube-apiserver kube-scheduler)
ETCD_PORT=${K8S_ETCD_PORT:-26379} # ports below 32768: the kernel's ephemeral range starts there
API_PORT=${K8S_API_PORT:-26443}
SCHEDULER_PORT=${K8S_SCHEDULER_PORT:-26259}
EXTENDER_URL=${FAIRLANE_EXTENDER_URL:-http://127.0.0.1:8081/v1/extender}
START_TIMEOUT=${K8S_START_TIMEOUT:-90}
DIR=${FAIRLANE_STATE_DIR:-$ROOT/.local}/k8s-$API_PORT

die() { echo "k8s.sh: $*" >&2; exit 1; }
say() { echo "k8s.sh: $*" >&2; }

# what, command...: run it with its output kept; on failure one line says what failed and
# its last words (the Go module proxy's refusal, usually), not the whole log.
quietly() {
  local what=$1 out; shift
  out=$("$@" 2>&1) && return 0
  die "$what failed (Go module proxy $(go env GOPROXY)): $(tail -n 1 <<<"$out")"
}

# module@version into Go's module cache; its `go mod download -json` on stdout. A proxy
# that refuses or cannot be reached is one line naming the proxy and its answer.
download() {
  local out why
  out=$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "$1" 2>&1) && {
    echo "$out"
    return 0
  }
  why=$(sed -n 's/^[[:space:]]*"Error": "\(.*\)",*$/\1/p' <<<"$out" | sed 's/\\"/"/g' | head -n 1)
  die "cannot download $1 from the Go module proxy $(go env GOPROXY): ${why:-$(tail -n 1 <<<"$out")}"
}

built() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x $CACHE/bin/$b ]] || return 1; done
}

# Published staging modules carry the minor version as v0.<minor>.<patch>.
staging_version() { echo "v0.${K8S_VERSION#v1.}"; }

build_kubernetes() {
  local work=$1 src staging
  staging=$(staging_version)
  src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$(download "k8s.io/kubernetes@$K8S_VERSION")")
  [[ -d $src ]] || die "go mod download gave no source directory"
  cp -r "$src" "$work/kubernetes"
  chmod -R u+w "$work/kubernetes"
  cd "$work/kubernetes"
  rm -f go.work go.work.sum
  # replace k8s.io/x => ./staging/src/k8s.io/x  ->  k8s.io/x => k8s.io/x v0.N.M; the two
  # sample modules are not published for the release and nothing we build uses them.
  sed -i -E \
    -e '/=> \.\/staging\/src\/k8s\.io\/(sample-cli-plugin|sample-controller)$/d' \
    -e "s#(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+#\1 => \1 $staging#" go.mod
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  say "building kube-scheduler and kube-apiserver (the slow part) ..."
  GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$CACHE/bin.tmp/" \
    -ldflags "-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
    ./cmd/kube-scheduler ./cmd/kube-apiserver
}

build_etcd() {
  local work=$1
  mkdir -p "$work/etcd" && cd "$work/etcd"
  quietly "go mod init" go mod init fairlane.local/etcd-build
  say "building etcd $ETCD_VERSION ..."
  GOWORK=off GOFLAGS=-mod=mod quietly "fetching etcd's modules" \
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$CACHE/bin.tmp/etcd" go.etcd.io/etcd/server/v3
}

cmd_build() {
  if built; then say "cached in $CACHE/bin"; return 0; fi
  command -v go >/dev/null ||
    die "go not found: Go >= 1.26 builds the tests' Kubernetes $K8S_VERSION (https://go.dev/dl/)"
  say "building the Kubernetes control plane once (etcd $ETCD_VERSION, kube-apiserver and" \
    "kube-scheduler $K8S_VERSION) from the Go module proxy: about 10 min on 2 cores;" \
    "cached in $CACHE"
  local started=$SECONDS
  WORK=$(mktemp -d)
  trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
  local work=$WORK
  (cd "$work" && quietly "go mod init" go mod init fairlane.local/k8s-build)
  # The first download says at once whether the proxy answers, before any build starts.
  say "downloading k8s.io/kubernetes@$K8S_VERSION ..."
  download "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
  mkdir -p "$CACHE/bin.tmp"
  (build_etcd "$work")
  (build_kubernetes "$work")
  rm -rf "$CACHE/bin" && mv "$CACHE/bin.tmp" "$CACHE/bin"
  say "built in $((SECONDS - started)) s: $(ls "$CACHE/bin" | tr '\n' ' ')in $CACHE/bin"
}

# --- up / down ---------------------------------------------------------------------------

pid_alive() { [[ -f $DIR/$1.pid ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

start() { # name, args...: in the background, its log and pid in $DIR
  local name=$1; shift
  pid_alive "$name" && return 0
  nohup "$CACHE/bin/$name" "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

wait_until() { # what, command...: until the command succeeds or the timeout passes
  local what=$1 deadline=$((SECONDS + START_TIMEOUT)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what not ready after ${START_TIMEOUT}s (logs in $DIR)"
    sleep 0.3
  done
}

certificates() {
  [[ -f $DIR/pki/token ]] && return 0
  local pki=$DIR/pki
  mkdir -p "$pki" && chmod 700 "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=fairlane-test-ca \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >"$pki/san.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 30 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  local admin scheduler
  admin=$(openssl rand -hex 24) scheduler=$(openssl rand -hex 24)
  # token,user,uid,"groups": the admin, and kube-scheduler as the user that the
  # bootstrap RBAC policy (system:kube-scheduler) is written for.
  printf '%s,admin,admin,"system:masters"\n%s,system:kube-scheduler,kube-scheduler\n' \
    "$admin" "$scheduler" >"$pki/tokens.csv"
  echo "$admin" >"$pki/token"
  echo "$scheduler" >"$pki/scheduler-token"
}

kubeconfig() { # token file -> kubeconfig on stdout
  cat <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: local
    cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$DIR/pki/ca.crt"}
users:
  - name: user
    user: {token: "$(cat "$1")"}
contexts:
  - name: local
    context: {cluster: local, user: user}
current-context: local
YAML
}

# deploy/'s KubeSchedulerConfiguration, with this plane's kubeconfig, no leader
# election, and the extender at $EXTENDER_URL; everything else exactly as shipped.
scheduler_config() {
  sed -E \
    -e "s#^(  kubeconfig:).*#\1 $DIR/scheduler.kubeconfig#" \
    -e "s#^(  leaderElect:).*#\1 false#" \
    -e "s#^(  - urlPrefix:).*#\1 $EXTENDER_URL#" \
    "$ROOT/deploy/kube-scheduler/kube-scheduler-config.yaml"
}

api_ready() { curl -sf --cacert "$DIR/pki/ca.crt" "https://127.0.0.1:$API_PORT/readyz"; }
scheduler_ready() { curl -sfk "https://127.0.0.1:$SCHEDULER_PORT/healthz"; }

cmd_env() {
  [[ -f $DIR/pki/token ]] || die "no control plane in $DIR (run up)"
  echo "KUBE_API_URL=https://127.0.0.1:$API_PORT"
  echo "KUBE_TOKEN=$(cat "$DIR/pki/token")"
  echo "KUBE_CA_FILE=$DIR/pki/ca.crt"
  echo "KUBECONFIG=$DIR/admin.kubeconfig"
}

cmd_up() {
  built || die "no binaries in $CACHE/bin: run scripts/k8s.sh build first (~10 min, once)"
  mkdir -p "$DIR"
  certificates
  kubeconfig "$DIR/pki/token" >"$DIR/admin.kubeconfig"
  kubeconfig "$DIR/pki/scheduler-token" >"$DIR/scheduler.kubeconfig"
  scheduler_config >"$DIR/scheduler-config.yaml"
  start etcd --data-dir "$DIR/etcd" --name fairlane-test \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "fairlane-test=http://127.0.0.1:$((ETCD_PORT + 1))" \
    --unsafe-no-fsync --log-level warn
  wait_until etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  local pki=$DIR/pki
  # No controller-manager: TaintNodesByCondition would leave every new Node tainted
  # not-ready, and ServiceAccount would refuse pods until a `default` account exists.
  start kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --endpoint-reconciler-type none --service-cluster-ip-range 10.96.0.0/16 \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --authorization-mode Node,RBAC \
    --disable-admission-plugins TaintNodesByCondition,ServiceAccount
  wait_until kube-apiserver api_ready
  start kube-scheduler --config "$DIR/scheduler-config.yaml" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT"
  wait_until kube-scheduler scheduler_ready
  say "up: API https://127.0.0.1:$API_PORT, extender $EXTENDER_URL (logs in $DIR)"
  cmd_env
}

cmd_down() {
  local name pid
  for name in kube-scheduler kube-apiserver etcd; do
    [[ -f $DIR/$name.pid ]] || continue
    pid=$(cat "$DIR/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/$name.pid"
  done
  [[ ${1:-} == --purge || ${K8S_PURGE:-} == 1 ]] && rm -rf "$DIR"
  return 0
}

cmd_status() {
  local name
  for name in etcd kube-apiserver kube-scheduler; do
    if pid_alive "$name"; then echo "$name: running"; else echo "$name: stopped"; fi
  done
}

case ${1:-} in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down "${2:-}" ;;
  env) cmd_env ;;
  status) cmd_status ;;
  *) die "usage: scripts/k8s.sh build | up | down [--purge] | env | status" ;;
esac
