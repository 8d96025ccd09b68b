#!/bin/sh
# bench/peer_idle_cpu.sh — two daemons (B lends its cpu, A peers B) idle for 10 s: CPU seconds each used, per polling window
# (BENCHMARKS.md, "Peers over UCX": what polling costs a node whose link is idle; /proc ticks of 10 ms)
BUILD=${BUILD:-build}
K=idle-peer-key-0123456789
T=$(mktemp -d)
for poll in 0 1000 10000; do
  "$BUILD/tandem" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu --threads 1 --node-name nodeB --kv-listen 127.0.0.1:0 --peer-devices cpu --peer-key $K --peer-poll-us $poll --log-file $T/b$poll.log >/dev/null 2>&1 &
  B=$!
  i=0; while [ $i -lt 200 ] && ! grep -q event=ready $T/b$poll.log 2>/dev/null; do sleep 0.05; i=$((i+1)); done
  port=$(sed -n 's/.*listener=peers .*port=\([0-9]*\).*/\1/p' $T/b$poll.log | head -1)
  "$BUILD/tandem" serve --host 127.0.0.1 --port 0 --admin-port 0 --devices cpu --threads 1 --node-name nodeA --peers 127.0.0.1:$port --peer-key $K --peer-poll-us $poll --log-file $T/a$poll.log >/dev/null 2>&1 &
  A=$!
  i=0; while [ $i -lt 200 ] && ! grep -q event=ready $T/a$poll.log 2>/dev/null; do sleep 0.05; i=$((i+1)); done
  sleep 2
  cpu() { awk '{print $14+$15}' /proc/$1/stat; }
  a0=$(cpu $A); b0=$(cpu $B); sleep 10; a1=$(cpu $A); b1=$(cpu $B)
  tck=$(getconf CLK_TCK)
  echo "peer_poll_us=$poll: 10 s idle (heartbeats every second): A $(( (a1-a0)*1000/tck )) ms CPU, B $(( (b1-b0)*1000/tck )) ms CPU; load $(cut -d' ' -f1 /proc/loadavg)"
  kill $A $B; wait $A $B 2>/dev/null
done
rm -rf $T
