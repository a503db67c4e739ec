#!/usr/bin/env bash
# A private Docker engine for tests and local runs on a CPU machine (as root), started the way these machines
# allow: no bridge network, no iptables rules (traffic to private ranges such as Docker's 172.17.0.0/16 is
# flagged here), so containers use --network none or --network host only.
#
#   infra/docker-engine.sh start     # install docker.io if missing, start dockerd (idempotent), wait until ready
#   infra/docker-engine.sh stop      # remove every container on this engine, stop the daemon it started
#   infra/docker-engine.sh status    # running / not running (exit 0 / 3)
#   eval "$(infra/docker-engine.sh env)"   # DOCKER_HOST for the docker CLI and docker-py
#
# The daemon is ours alone: its own socket, pidfile, data-root and exec-root under KERNELRL_ENGINE_DIR (default
# /var/cache/kernelrl/docker, kept between runs on this machine so built images are cached), and its own
# containerd namespace, so it never touches another engine on the same host. Every container on it was started
# by us (tests, flows), which is why `stop` may remove them all.
#
# Env: KERNELRL_ENGINE_DIR (state folder), KERNELRL_ENGINE_WAIT_S (readiness timeout, default 60).
set -euo pipefail

DIR=${KERNELRL_ENGINE_DIR:-/var/cache/kernelrl/docker}
SOCK="$DIR/docker.sock"
PIDFILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
HOST="unix://$SOCK"
WAIT_S=${KERNELRL_ENGINE_WAIT_S:-60}

say() { echo "docker-engine: $*" >&2; }

docker_cli() {  # the CLI against our socket (any docker CLI works: it negotiates the API version down)
    DOCKER_HOST="$HOST" docker "$@"
}

daemon_pid() {  # the pid of our dockerd if it is alive, else nothing
    [ -f "$PIDFILE" ] || return 0
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -qa dockerd "/proc/$pid/cmdline" 2>/dev/null; then
        echo "$pid"
    fi
}

ready() {
    [ -S "$SOCK" ] && curl -fsS --max-time 2 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1
}

install_engine() {
    command -v dockerd >/dev/null 2>&1 && command -v containerd >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] || { say "dockerd is not installed and we are not root: cannot install docker.io"; exit 1; }
    say "installing docker.io (apt)"
    local guard=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        # the package's postinst must not start a default daemon (it would create the docker0 bridge)
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        guard=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends docker.io >/dev/null 2>&1; then
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends docker.io >/dev/null
    fi
    [ "$guard" = 1 ] && rm -f /usr/sbin/policy-rc.d
    command -v dockerd >/dev/null 2>&1 || { say "docker.io installed but dockerd is not on PATH"; exit 1; }
}

start() {
    if [ -n "$(daemon_pid)" ] && ready; then
        say "already running (pid $(daemon_pid), $HOST)"
        return 0
    fi
    [ "$(id -u)" = 0 ] || { say "dockerd needs root here"; exit 1; }
    install_engine
    command -v curl >/dev/null 2>&1 || { apt-get install -y -q curl >/dev/null; }
    mkdir -p "$DIR/data" "$DIR/run"
    if [ -n "$(daemon_pid)" ]; then  # alive but not answering: give it the readiness wait below
        say "dockerd (pid $(daemon_pid)) is up but not ready yet; waiting"
    else
        rm -f "$SOCK" "$PIDFILE"
        say "starting dockerd ($HOST, data-root $DIR/data)"
        # --bridge=none --iptables=false --ip6tables=false: no docker0, no NAT rules (network rule above).
        # Own exec-root/pidfile/socket/containerd namespace: independent of any other engine on this host.
        setsid nohup dockerd \
            --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
            --host "$HOST" --pidfile "$PIDFILE" \
            --data-root "$DIR/data" --exec-root "$DIR/run" \
            --containerd-namespace kernelrl --containerd-plugins-namespace kernelrl-plugins \
            --log-level warn \
            </dev/null >"$LOG" 2>&1 &
    fi
    local deadline=$((SECONDS + WAIT_S))
    until ready; do
        if [ -z "$(daemon_pid)" ] && [ $SECONDS -gt $((deadline - WAIT_S + 5)) ]; then
            say "dockerd exited; last log lines:"
            tail -n 20 "$LOG" >&2 || true
            exit 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            say "dockerd not ready after ${WAIT_S}s; last log lines:"
            tail -n 20 "$LOG" >&2 || true
            exit 1
        fi
        sleep 0.3
    done
    say "ready (pid $(daemon_pid)); use: export DOCKER_HOST=$HOST"
}

stop() {
    local pid
    pid=$(daemon_pid)
    if [ -z "$pid" ]; then
        say "not running"
        cleanup_mounts
        return 0
    fi
    if ready; then
        local ids
        ids=$(docker_cli ps -aq 2>/dev/null || true)
        if [ -n "$ids" ]; then
            say "removing containers: $(echo "$ids" | tr '\n' ' ')"
            # shellcheck disable=SC2086
            docker_cli rm -f $ids >/dev/null 2>&1 || true
        fi
    fi
    local ctrd_pid=""
    [ -f "$DIR/run/containerd/containerd.pid" ] && ctrd_pid=$(cat "$DIR/run/containerd/containerd.pid" 2>/dev/null || true)
    say "stopping dockerd (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
        say "dockerd did not stop in 20 s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    # the containerd that dockerd started for itself (under our exec-root) goes with it
    if [ -n "$ctrd_pid" ] && kill -0 "$ctrd_pid" 2>/dev/null && grep -qa containerd "/proc/$ctrd_pid/cmdline"; then
        for _ in $(seq 1 50); do kill -0 "$ctrd_pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$ctrd_pid" 2>/dev/null && kill -KILL "$ctrd_pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE" "$SOCK"
    cleanup_mounts
    say "stopped"
}

cleanup_mounts() {  # overlay/shm mounts a killed daemon may leave under our folder (deepest first)
    local m
    awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts 2>/dev/null | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status)
        if [ -n "$(daemon_pid)" ] && ready; then echo "running (pid $(daemon_pid), $HOST)"; else echo "not running"; exit 3; fi ;;
    env) echo "export DOCKER_HOST=$HOST" ;;
    host) echo "$HOST" ;;
    -h|--help|help) sed -n '2,16p' "$0" ;;
    *) say "usage: $0 start|stop|status|env"; exit 2 ;;
esac
