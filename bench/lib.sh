# Shared by the benchmark scripts (sourced, not run, once $WORK is set): a free loopback port, waiting for a
# listener, a process's CPU time, the host's steal time and a share in percent, nginx's own request count, a ratio,
# the median of numbers on stdin, the servers a script started and their cleanup, and the configuration of nginx
# as the peer (one worker, no logs, keep-alive without a limit, a backlog above tokio's 1,024, 127.0.0.1 only).

# The servers a script started: append each pid; `trap cleanup EXIT` stops them all and removes $WORK.
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}

# Waits (10 s at most) until something listens on 127.0.0.1:PORT.
wait_port() { for _ in $(seq 200); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing listens on $1" >&2; return 1; }

# CPU seconds (user + system, every thread) a running process has used so far.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($14 + $15) / hz}' "/proc/$1/stat"; }
# A process's user and system CPU so far, "USER SYSTEM" in seconds (all its threads).
cpu_user_sys() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f %.2f\n", $14 / hz, $15 / hz}' "/proc/$1/stat"; }

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# Requests an nginx has served so far, read from its stub_status at http://127.0.0.1:PORT/ (the third number on
# the third line counts every request, this one included). Between two readings the clients' requests are
# (after - before - 1).
nginx_served() { curl -s "http://127.0.0.1:$1/" | awk 'NR==3 {print $3}'; }

# The host's steal time so far, summed over both CPUs: "STEAL TOTAL" in clock ticks from /proc/stat (the
# hypervisor running something else while this guest wanted the CPU).
steal_ticks() { awk '$1 ~ /^cpu[0-9]+$/ {s += $9; for (i = 2; i <= 9; i++) t += $i} END {print s, t}' /proc/stat; }
# Between two "PART TOTAL" readings (steal_ticks, or any other such pair), the share of PART in percent.
share_pct() { awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); d = y[2] - x[2]; printf "%.0f", (d > 0 ? (y[1] - x[1]) / d * 100 : 0)}'; }

# A / B with two decimals (0 when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }

# The median of the numbers on stdin, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Writes DIR/nginx.conf: one worker on 127.0.0.1:PORT whose `location /` block is LOCATION; pid, logs and
# temporary files under DIR. Start it with `nginx -p DIR -c DIR/nginx.conf`. Optional: LISTEN_FLAGS after the
# address (`ssl http2`), SERVER_EXTRA directives in that server (certificates), HTTP_EXTRA more in `http`
# (another server, such as a stub_status one).
write_nginx_conf() {
  local dir=$1 port=$2 location=$3 listen_flags=${4:-} server_extra=${5:-} http_extra=${6:-}
  mkdir -p "$dir/logs"
  cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/logs/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir; uwsgi_temp_path $dir; scgi_temp_path $dir;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$port backlog=8192 $listen_flags; $server_extra location / { $location } }
  $http_extra
}
CONF
}
