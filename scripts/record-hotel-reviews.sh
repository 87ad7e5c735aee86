#!/usr/bin/env bash
# Records scenarios/traces/hotel-reviews.nginx.log, the real record scenarios/hotel-reviews-replay.yaml is imported
# from: Debian's nginx in front of faultd playing seed 001's reviews degradation (scenarios/traces/hotel-reviews.csv,
# 120 ms to 14 s over 5 s from t = 15 s, no error) for 33 s at 40 requests per second, logging with a log_format
# that `faultline import` reads (the end time, the request's and the upstream's times and status). Then imports it:
#   faultline import scenarios/traces/hotel-reviews.nginx.log --format nginx --log-format "$LOG" -o OUT.yaml
# The library scenario keeps the imported dependency (route `reviews`, its phases renamed) and its own SUT, load
# and expectations. Needs nginx (apt-get install -y nginx) and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$NGINX" ] || { echo "nginx is not installed: apt-get install -y nginx" >&2; exit 1; }
FAULTLINE="${FAULTLINE:-target/release/faultline}"
[ -x "$FAULTLINE" ] || { echo "$FAULTLINE is missing: cargo build --release" >&2; exit 1; }
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
LOG='$remote_addr - [$time_local] $msec "$request" $status $request_time "$upstream_addr" "$upstream_response_time" "$upstream_status"'
cat > "$DIR/nginx.conf.in" <<EOF
daemon off;
worker_processes 1;
pid $DIR/nginx.pid;
error_log $DIR/error.log warn;
user nobody nogroup;
events { worker_connections 4096; }
http {
  log_format timed '$LOG';
  access_log $DIR/access.log timed;
  client_body_temp_path $DIR/body;
  proxy_temp_path $DIR/proxy;
  fastcgi_temp_path $DIR/fastcgi;
  uwsgi_temp_path $DIR/uwsgi;
  scgi_temp_path $DIR/scgi;
  upstream reviews { server 127.0.0.1:@FAULTD_PORT@; keepalive 64; }
  server {
    listen 127.0.0.1:@SUT_PORT@;
    location = /health { access_log off; return 200 "ok\n"; }
    location / { proxy_pass http://reviews; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_read_timeout 30s; }
  }
}
EOF
cp scenarios/traces/hotel-reviews.csv "$DIR/"
cat > "$DIR/record.yaml" <<EOF
name: hotel-reviews-record
description: nginx in front of the reviews dependency of seed 001, degrading as traces/hotel-reviews.csv says.
duration: 33s
seed: 1
dependency:
  routes:
    reviews: { path: /reviews/*, latency: { p50: 120ms, p99: 200ms } }
  phases:
    - { name: healthy, at: 0s }
replay: { trace: hotel-reviews.csv, route: reviews, at: 15s }
sut:
  command: [ sh, -c, "sed -e s/@FAULTD_PORT@/{faultd.port}/ -e s/@SUT_PORT@/{sut.port}/ $DIR/nginx.conf.in > $DIR/nginx.conf && exec $NGINX -p $DIR -c $DIR/nginx.conf -e $DIR/early.log" ]
  url: http://127.0.0.1:{sut.port}
  ready: /health
load:
  rate: 40/s
  timeout: 20s
  requests: [ { get: "/reviews/{rand:1..5000}" } ]
EOF
"$FAULTLINE" run "$DIR/record.yaml" --report-dir "$DIR/report" >/dev/null
cp "$DIR/access.log" scenarios/traces/hotel-reviews.nginx.log
echo "wrote scenarios/traces/hotel-reviews.nginx.log ($(wc -l < scenarios/traces/hotel-reviews.nginx.log) lines)"
