#!/usr/bin/env bash
# A failover behind Sentinel, end to end, on loopback: a primary with two replicas and
# three Sentinels, two `jobqueue worker --exec` workers and a producer reaching them with
# --sentinel, the primary SIGKILLed under load. Prints what the workers logged about the
# switch, the queue's counts at the end, and how many of the jobs ran (the workers record
# each run), so a job lost with the failover is counted.
#
#   scripts/sentinel-failover-demo.sh            # builds target/debug/jobqueue if needed
#   DURABILITY=replicated:1:2s scripts/sentinel-failover-demo.sh   # writes wait for a replica
#   KEEP_LOGS=1 scripts/sentinel-failover-demo.sh  # keep the Redis and Sentinel logs
#   JOBQUEUE=/path/to/jobqueue scripts/sentinel-failover-demo.sh
#
# Needs redis-server (6.2+; scripts/ensure-redis.sh installs it). Uses free ports from
# 40000 up and a temporary directory; stops everything it started on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

REDIS_SERVER="${REDIS_SERVER:-redis-server}"
command -v "$REDIS_SERVER" >/dev/null || { echo "error: needs redis-server (scripts/ensure-redis.sh)" >&2; exit 1; }
if [ -z "${JOBQUEUE:-}" ]; then
  cargo build --quiet --bin jobqueue
  JOBQUEUE=target/debug/jobqueue
fi
JOBS="${JOBS:-300}"

dir="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${KEEP_LOGS:-}" ]; then echo "logs kept in $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
up() { # wait until a PING on $1 answers
  for _ in $(seq 100); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "error: nothing answers on $1" >&2; exit 1
}

primary=$(free_port)
"$REDIS_SERVER" --port "$primary" --bind 127.0.0.1 --save '' --appendonly no \
  --repl-ping-replica-period 1 --dir "$dir" --logfile "$dir/redis-$primary.log" &
pids+=($!); primary_pid=$!
disown "$primary_pid"   # its SIGKILL below is the point, not worth a shell notice
up "$primary"
replicas=()
for _ in 1 2; do
  port=$(free_port)
  "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --replicaof 127.0.0.1 "$primary" --repl-ping-replica-period 1 --dir "$dir" \
    --logfile "$dir/redis-$port.log" &
  pids+=($!); replicas+=("$port")
  up "$port"
done
sentinels=()
for _ in 1 2 3; do
  port=$(free_port)
  cat > "$dir/sentinel-$port.conf" <<CONF
port $port
bind 127.0.0.1
dir $dir
logfile $dir/sentinel-$port.log
sentinel monitor mymaster 127.0.0.1 $primary 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 3000
sentinel parallel-syncs mymaster 2
CONF
  "$REDIS_SERVER" "$dir/sentinel-$port.conf" --sentinel &
  pids+=($!); sentinels+=("127.0.0.1:$port")
  up "$port"
done
SENTINEL=$(IFS=,; echo "${sentinels[*]}")
first_sentinel=${sentinels[0]#127.0.0.1:}
# Until every Sentinel sees both replicas and the others.
for _ in $(seq 300); do
  ready=yes
  for s in "${sentinels[@]}"; do
    info=$(redis-cli -p "${s#127.0.0.1:}" sentinel master mymaster 2>/dev/null | paste - - | tr '\t' '=')
    grep -q '^num-slaves=2$' <<<"$info" && grep -q '^num-other-sentinels=2$' <<<"$info" || ready=no
  done
  [ "$ready" = yes ] && break
  sleep 0.2
done
[ "$ready" = yes ] || { echo "error: the Sentinels did not settle" >&2; exit 1; }
echo "primary 127.0.0.1:$primary, replicas ${replicas[*]/#/127.0.0.1:}, Sentinels $SENTINEL"

workers=()
export JOBQUEUE_SENTINEL="$SENTINEL" JOBQUEUE_MASTER_NAME=mymaster JOBQUEUE_TAG=failover-demo
[ -n "${DURABILITY:-}" ] && export JOBQUEUE_DURABILITY="$DURABILITY"
for w in 1 2; do
  # each run appends the job's payload ("payload N") to ran-W, one line per run
  "$JOBQUEUE" worker --worker-id "worker-$w" --concurrency 4 --visibility 5s \
    --exec sh -c "cat >>'$dir/ran-$w'; echo >>'$dir/ran-$w'; sleep 0.02" >"$dir/worker-$w.log" 2>&1 &
  pids+=($!); workers+=($!)
done

# The producer: one job at a time, each with its own id (a retried enqueue is not a
# second job), retrying an enqueue that fails while the primary is being replaced.
(
  for i in $(seq 1 "$JOBS"); do
    until "$JOBQUEUE" enqueue --id "job-$i" "payload $i" >/dev/null 2>>"$dir/producer.log"; do
      sleep 0.2
    done
  done
) &
producer=$!
pids+=($producer)

sleep 2
echo "SIGKILL the primary 127.0.0.1:$primary (pid $primary_pid) under load"
kill -9 "$primary_pid"
killed_at=$(date +%s.%N)
wait "$producer" || true
new=""
for _ in $(seq 300); do
  new=$(redis-cli -p "$first_sentinel" sentinel get-master-addr-by-name mymaster | paste -sd: -)
  [ "$new" != "127.0.0.1:$primary" ] && break
  sleep 0.1
done
echo "the Sentinels name $new"

# Until every job is done (the reaper hands back what the kill interrupted).
for _ in $(seq 600); do
  stats=$("$JOBQUEUE" stats --json)
  python3 -c 'import json,sys; s=json.loads(sys.argv[1]); sys.exit(0 if s["pending"]+s["processing"]+s["delayed"]==0 and s["enqueued"]>0 else 1)' "$stats" && break
  sleep 0.2
done
final=$("$JOBQUEUE" stats --json)
for pid in "${workers[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
wait "${workers[@]}" 2>/dev/null || true

for w in 1 2; do
  echo
  echo "--- worker-$w: its whole log (the primary was SIGKILLed at $(date -d "@$killed_at" -u +%H:%M:%S.%3N) UTC)"
  cat "$dir/worker-$w.log"
done
echo
echo "--- producer: enqueue calls that failed during the switch (each retried with its id): $(grep -c . "$dir/producer.log" || true)"
head -n 2 "$dir/producer.log"
echo
echo "--- the queue at the end ($JOBS jobs enqueued)"
echo "$final"
echo
# What ran, from the workers' own records: a job whose enqueue was acknowledged but that
# never ran was lost (with the default durability a failover may drop acknowledged writes;
# see docs/reliability.md). The queue's counters above live in Redis and can lose
# increments the same way.
ran=$(cat "$dir"/ran-* 2>/dev/null | grep -c . || true)
distinct=$(cat "$dir"/ran-* 2>/dev/null | grep . | sort -u | wc -l)
echo "--- jobs run: $distinct of $JOBS distinct ($ran runs), lost: $((JOBS - distinct))"
