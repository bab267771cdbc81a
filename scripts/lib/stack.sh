# shellcheck shell=bash
# Sourced, not run. One way to start "a private Redis + workers + gateways and wait until they
# are ready", shared by scripts/run-local, scripts/conformance, scripts/stack-env and
# deploy/local/up, so that every one of them finds or installs Redis the same way and fails
# loudly (with the log of whatever did not come up) instead of carrying on half started.
#
# Settings, read by stack_up (arrays may be empty):
#   STACK_DIR            directory for pids, logs/ and (unless STACK_REDIS_DIR) redis/; required
#   STACK_BIN            directory holding taskgate-gateway and taskgate-worker (target/debug)
#   STACK_REDIS_URL      a Redis to use instead of starting one
#   STACK_REDIS_DIR      Redis data directory (default $STACK_DIR/redis)
#   STACK_REDIS_PORT     Redis port (default: a free one)
#   STACK_AOF            yes: append-only file on (tasks outlive a restart); default no
#   STACK_CLUSTER        N > 0: a Redis Cluster of N primaries instead of one server (needs
#                        redis-cli, which comes with redis-server)
#   STACK_WORKERS        number of workers (1), each given --metrics-listen on a free port
#   STACK_WORKER_ARGS    array: arguments of every worker
#   STACK_GATEWAYS       number of gateways (1)
#   STACK_GATEWAY_PORTS  array: their ports (default: free ones)
#   STACK_GATEWAY_ARGS   array: arguments of every gateway (--auth $STACK_AUTH is added: none unless set)
#   STACK_TOKEN          with STACK_AUTH, the bearer token the readiness check lists tools with
#   STACK_TOOLS          0: do not wait for a tool to be listed (workers serving none)
#   STACK_SETSID         1: each process in its own session (it outlives the shell; see
#                        deploy/local/up --detach)
# After stack_up: TASKGATE_REDIS_URL (exported), STACK_REDIS_PORT, STACK_GATEWAY_PORTS,
# STACK_WORKER_METRICS (ports), and "$STACK_DIR/pids" ("name pid" per line).
# stack_stop stops what "$STACK_DIR/pids" lists: gateways first (their streams end with a
# result), then workers (they drain and hand their leases back), Redis last.

stack_say() { printf '[%s] %s\n' "${STACK_NAME:-stack}" "$*" >&2; }
stack_die() {
  stack_say "$*"
  exit 1
}

# apt-get install, as root or through sudo. A package's init script may not start a
# system-wide server (policy-rc.d): the stack runs its own Redis.
stack_apt_install() {
  command -v apt-get >/dev/null || return 1
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || return 1
    sudo=(sudo)
  fi
  stack_say "installing $* (${sudo[*]:+sudo }apt-get install)"
  # shellcheck disable=SC2016 # expanded by the inner shell
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive sh -ec '
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      printf "#!/bin/sh\nexit 101\n" >"$policy"; chmod +x "$policy"
      trap "rm -f $policy" EXIT
    fi
    apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
  ' sh "$@"
}

# The exact command that installs Redis here, for a system this cannot install on.
stack_redis_install_hint() {
  local id=""
  [ -r /etc/os-release ] && id=$(. /etc/os-release && echo "${ID:-} ${ID_LIKE:-}")
  case "$(uname -s) $id" in
    Darwin*) echo "brew install redis" ;;
    *fedora* | *rhel* | *centos*) echo "sudo dnf install -y redis" ;;
    *arch*) echo "sudo pacman -S --noconfirm redis" ;;
    *alpine*) echo "sudo apk add redis" ;;
    *suse*) echo "sudo zypper install -y redis" ;;
    *) echo "install redis-server 7 (or valkey-server) with your package manager" ;;
  esac
}

# Sets STACK_REDIS_SERVER to redis-server or valkey-server, installing redis-server on
# Debian or Ubuntu when neither is on PATH.
stack_find_redis() {
  STACK_REDIS_SERVER=$(command -v redis-server || command -v valkey-server || true)
  if [ -z "$STACK_REDIS_SERVER" ]; then
    stack_apt_install redis-server || true
    STACK_REDIS_SERVER=$(command -v redis-server || true)
  fi
  [ -n "$STACK_REDIS_SERVER" ] || stack_die "neither redis-server nor valkey-server is on PATH, and it could not be installed here. Run: $(stack_redis_install_hint)
(or point TASKGATE_REDIS_URL at a Redis you run)"
}

# One Redis command over bash's /dev/tcp (no redis-cli needed); prints the reply's first line.
stack_redis() {
  local port=$1
  shift
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf '*%d\r\n' "$#" >&3
    for arg in "$@"; do printf '$%d\r\n%s\r\n' "${#arg}" "$arg" >&3; done
    IFS= read -r -t 2 line <&3 || exit 1
    printf '%s\n' "${line%$'\r'}"
  ) 2>/dev/null
}

# 0 when GET http://127.0.0.1:PORT/PATH answers 200.
stack_http_ok() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
    IFS= read -r -t 2 status <&3 || exit 1
    [[ "$status" == "HTTP/1."?" 200"* ]]
  ) 2>/dev/null
}

stack_redis_pong() { [ "$(stack_redis "$STACK_REDIS_PORT" PING)" = "+PONG" ]; }

stack_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A free port below the kernel's ephemeral range, so that an outgoing connection cannot take it
# between this probe and the server's bind.
stack_free_port() {
  local port low=32768
  [ -r /proc/sys/net/ipv4/ip_local_port_range ] && read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  [ "$low" -gt 12000 ] || low=32768
  for _ in $(seq 100); do
    port=$((10000 + RANDOM % (low - 10000)))
    if stack_port_free "$port"; then
      echo "$port"
      return 0
    fi
  done
  stack_die "found no free port"
}

# stack_start NAME COMMAND...: runs it in the background, logging to $STACK_DIR/logs/NAME.log.
stack_start() {
  local name=$1
  shift
  mkdir -p "$STACK_DIR/logs"
  if [ "${STACK_SETSID:-0}" = 1 ]; then
    setsid "$@" >"$STACK_DIR/logs/$name.log" 2>&1 </dev/null &
  else
    "$@" >"$STACK_DIR/logs/$name.log" 2>&1 </dev/null &
  fi
  echo "$name $!" >>"$STACK_DIR/pids"
}

stack_pid() { sed -n "s/^$1 //p" "$STACK_DIR/pids"; }

# stack_wait NAME SECONDS CHECK...: until CHECK succeeds; fails loudly, with NAME's log, when
# NAME exits or the time runs out.
stack_wait() {
  local name=$1 secs=$2 pid
  shift 2
  pid=$(stack_pid "$name")
  local deadline=$((SECONDS + secs))
  until "$@"; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      stack_say "$name exited before it was ready; the end of $STACK_DIR/logs/$name.log:"
      tail -n 30 "$STACK_DIR/logs/$name.log" >&2 || true
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      stack_say "$name was not ready after ${secs}s; the end of $STACK_DIR/logs/$name.log:"
      tail -n 30 "$STACK_DIR/logs/$name.log" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
}

# 0 when the gateway on PORT lists at least one tool: the workers have published theirs.
stack_tools_listed() {
  # With authentication on ($STACK_AUTH), $STACK_TOKEN is sent as the bearer token.
  local auth=""
  [ -n "${STACK_TOKEN:-}" ] && auth="Authorization: Bearer $STACK_TOKEN"$'\r\n'
  local body='{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'POST /mcp HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n%sContent-Length: %d\r\n\r\n%s' \
      "$auth" "${#body}" "$body" >&3
    grep -q '"tools":\[{' <&3
  ) 2>/dev/null
}

# stack_cluster_up N: N cluster-enabled servers (own ports, bus ports and directories), joined
# with redis-cli; sets TASKGATE_REDIS_URL to the redis+cluster:// URL of them all.
stack_cluster_up() {
  local n=$1 i port bus seeds=() data
  command -v redis-cli >/dev/null || stack_die "redis-cli is not on PATH; it comes with Redis: $(stack_redis_install_hint)"
  for i in $(seq "$n"); do
    port=$(stack_free_port)
    bus=$(stack_free_port)
    data=${STACK_REDIS_DIR:-$STACK_DIR/redis}/$i
    mkdir -p "$data"
    stack_start "redis-$i" "$STACK_REDIS_SERVER" --port "$port" --bind 127.0.0.1 --dir "$data" --save '' \
      --appendonly "${STACK_AOF:-no}" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-port "$bus" --cluster-node-timeout 5000
    STACK_REDIS_PORT=$port
    stack_wait "redis-$i" 15 stack_redis_pong
    seeds+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$STACK_DIR/logs/cluster-create.log" 2>&1 \
    || { tail -n 20 "$STACK_DIR/logs/cluster-create.log" >&2; stack_die "redis-cli --cluster create failed"; }
  for i in $(seq "$n"); do
    port=${seeds[$((i - 1))]#127.0.0.1:}
    stack_wait "redis-$i" 30 stack_cluster_ok "$port" "$n"
  done
  local joined
  joined=$(IFS=,; echo "${seeds[*]}")
  export TASKGATE_REDIS_URL="redis+cluster://$joined"
}

# 0 when the node on PORT says the cluster is ok and is linked to all N primaries.
stack_cluster_ok() {
  redis-cli -p "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok' \
    && [ "$(redis-cli -p "$1" cluster nodes 2>/dev/null | grep -c ' connected')" -eq "$2" ]
}

stack_up() {
  : "${STACK_DIR:?STACK_DIR must be set}"
  [ -n "${STACK_WORKER_ARGS+x}" ] || STACK_WORKER_ARGS=()
  [ -n "${STACK_GATEWAY_ARGS+x}" ] || STACK_GATEWAY_ARGS=()
  [ -n "${STACK_GATEWAY_PORTS+x}" ] || STACK_GATEWAY_PORTS=()
  local bin=${STACK_BIN:-${CARGO_TARGET_DIR:-target}/debug}
  for b in taskgate-gateway taskgate-worker; do
    [ -x "$bin/$b" ] || stack_die "$bin/$b is not built (cargo build --bins)"
  done
  mkdir -p "$STACK_DIR/logs"
  : >>"$STACK_DIR/pids"

  if [ -n "${STACK_REDIS_URL:-}" ]; then
    # A Redis of the user's: the gateways' readiness below says whether it answers.
    export TASKGATE_REDIS_URL="$STACK_REDIS_URL"
  elif [ "${STACK_CLUSTER:-0}" -gt 0 ]; then
    stack_find_redis
    stack_cluster_up "$STACK_CLUSTER"
  else
    stack_find_redis
    local data=${STACK_REDIS_DIR:-$STACK_DIR/redis}
    mkdir -p "$data"
    STACK_REDIS_PORT=${STACK_REDIS_PORT:-$(stack_free_port)}
    stack_port_free "$STACK_REDIS_PORT" \
      || stack_die "something already listens on 127.0.0.1:$STACK_REDIS_PORT; stop it or pick another port"
    stack_start redis "$STACK_REDIS_SERVER" --port "$STACK_REDIS_PORT" --bind 127.0.0.1 --dir "$data" \
      --save '' --appendonly "${STACK_AOF:-no}" --appendfsync everysec --protected-mode yes
    stack_wait redis 15 stack_redis_pong
    export TASKGATE_REDIS_URL="redis://127.0.0.1:$STACK_REDIS_PORT"
  fi

  # Gateways first, as a deployment rolls them out: a worker is never the only process up.
  local i port
  if [ "${#STACK_GATEWAY_PORTS[@]}" -eq 0 ]; then
    for _ in $(seq "${STACK_GATEWAYS:-1}"); do STACK_GATEWAY_PORTS+=("$(stack_free_port)"); done
  fi
  for i in "${!STACK_GATEWAY_PORTS[@]}"; do
    port=${STACK_GATEWAY_PORTS[$i]}
    stack_port_free "$port" || stack_die "something already listens on 127.0.0.1:$port"
    stack_start "gateway-$((i + 1))" "$bin/taskgate-gateway" --auth "${STACK_AUTH:-none}" --listen "127.0.0.1:$port" \
      "${STACK_GATEWAY_ARGS[@]}"
  done
  STACK_WORKER_METRICS=()
  for i in $(seq "${STACK_WORKERS:-1}"); do
    port=$(stack_free_port)
    STACK_WORKER_METRICS+=("$port")
    stack_start "worker-$i" "$bin/taskgate-worker" --metrics-listen "127.0.0.1:$port" \
      "${STACK_WORKER_ARGS[@]}"
  done

  # Ready: every gateway and worker says so, and the workers have published their tools.
  for i in "${!STACK_GATEWAY_PORTS[@]}"; do
    stack_wait "gateway-$((i + 1))" 60 stack_http_ok "${STACK_GATEWAY_PORTS[$i]}" /readyz
  done
  for i in "${!STACK_WORKER_METRICS[@]}"; do
    stack_wait "worker-$((i + 1))" 60 stack_http_ok "${STACK_WORKER_METRICS[$i]}" /readyz
  done
  [ "${STACK_TOOLS:-1}" = 0 ] || stack_wait worker-1 60 stack_tools_listed "${STACK_GATEWAY_PORTS[0]}"
}

# A pid is signalled only while it still runs the program that was started under it.
stack_ours() {
  local pid=$1 name=$2 cmd
  cmd=$(tr "\0" " " 2>/dev/null <"/proc/$pid/cmdline") || return 1
  case "$name" in
    nginx) [[ "$cmd" == *nginx* ]] ;;
    redis | redis-*) [[ "$cmd" == *redis-server* || "$cmd" == *valkey-server* ]] ;;
    gateway-*) [[ "$cmd" == *taskgate-gateway* ]] ;;
    worker-*) [[ "$cmd" == *taskgate-worker* ]] ;;
    *) return 1 ;;
  esac
}

# SIGTERM to every process of a group, SIGKILL to those alive 30 s later.
stack_stop_group() {
  local pattern=$1 victims=() name pid
  while read -r name pid; do
    # shellcheck disable=SC2254 # the pattern is a glob on purpose
    case "$name" in $pattern) stack_ours "$pid" "$name" && kill -TERM "$pid" 2>/dev/null && victims+=("$pid") ;; esac
  done <"$STACK_DIR/pids"
  for _ in $(seq 300); do
    local alive=0
    for pid in "${victims[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return 0
    sleep 0.1
  done
  for pid in "${victims[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

stack_stop() {
  [ -n "${STACK_DIR:-}" ] && [ -f "$STACK_DIR/pids" ] || return 0
  stack_stop_group 'nginx'
  stack_stop_group 'gateway-*'
  stack_stop_group 'worker-*'
  stack_stop_group 'redis*'
  : >"$STACK_DIR/pids"
}
