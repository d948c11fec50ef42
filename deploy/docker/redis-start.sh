#!/bin/sh
# rlvr-redis [REDIS-SERVER ARGS...]: redis-server with $RLVR_REDIS_PASSWORD as its requirepass.
# The password goes into a config file only this user can read ($RLVR_REDIS_CONF_DIR, default
# /tmp), never onto a command line (`ps` shows every process's arguments to every user of the
# host). Without a password it refuses to start (exit 2): the server listens beyond loopback.
# Clients read the same variable (rlvr_world.queue.server.redis_credentials).
#   rlvr-redis --ping [PORT]   the health check: exit 0 when the server answers PONG to the
#                              password (REDISCLI_AUTH: not on the command line either), else 1
set -eu
password="${RLVR_REDIS_PASSWORD:-}"
if [ "${1:-}" = "--ping" ]; then
  reply=$(REDISCLI_AUTH="$password" redis-cli -p "${2:-6379}" ping 2>&1) || true
  if [ "$reply" = "PONG" ]; then
    exit 0
  fi
  echo "rlvr-redis: ping answered: $reply" >&2
  exit 1
fi
if [ -z "$password" ]; then
  echo "rlvr-redis: error: RLVR_REDIS_PASSWORD is not set; Redis listens beyond loopback and" \
    "refuses to start without a password (e.g. RLVR_REDIS_PASSWORD=\$(openssl rand -hex 32)" \
    "in the environment of the whole stack: clients read the same variable)" >&2
  exit 2
fi
case "$password" in
  *[!A-Za-z0-9._~+/=-]*)
    echo "rlvr-redis: error: RLVR_REDIS_PASSWORD holds a character other than letters, digits" \
      "and ._~+/=- (openssl rand -hex 32 makes one that fits)" >&2
    exit 2
    ;;
esac
conf="${RLVR_REDIS_CONF_DIR:-/tmp}/rlvr-redis-auth.conf"
umask 077
printf 'requirepass "%s"\n' "$password" > "$conf"
exec redis-server "$conf" "$@"
