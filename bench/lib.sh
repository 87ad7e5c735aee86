# Shared by the benchmark scripts (sourced, not run): a free loopback port, the median of numbers on stdin, and
# the configuration of nginx as the peer (one worker, no logs, keep-alive without a limit, a backlog above
# tokio's 1,024, 127.0.0.1 only).

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# The median of the numbers on stdin, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Writes DIR/nginx.conf: one worker on 127.0.0.1:PORT whose `location /` block is LOCATION; pid, logs and
# temporary files under DIR. Start it with `nginx -p DIR -c DIR/nginx.conf`.
write_nginx_conf() {
  local dir=$1 port=$2 location=$3
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
  server { listen 127.0.0.1:$port backlog=8192; location / { $location } }
}
CONF
}
