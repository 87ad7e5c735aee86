"""A proxy listening on every interface, made through the stock toxiproxy-python client, unmodified.

Run by faultd/tests/toxiproxy_start.rs with FAULTD_TOXIPROXY (the API's host:port), ECHO_UPSTREAM (an echo server's
host:port), PROXY_PORT (a free port) and ALLOWED: "yes" for a faultd started with `--allow-listen 0.0.0.0`, which
takes a proxy on 0.0.0.0 (reached here through 127.0.0.1 only); "no" for one started without it, which refuses it
and says why.
"""

import os

from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic

# The helpers of the life-cycle test beside this file (importing it runs none of its checks).
from test_python_client import API_HOST, API_PORT, UPSTREAM, check, round_trip

PORT = int(os.environ["PROXY_PORT"])
LISTEN = "0.0.0.0:%d" % PORT
LOOPBACK = "127.0.0.1:%d" % PORT


def main():
    server = Toxiproxy()
    server.update_api_consumer(API_HOST, int(API_PORT))
    check(server.running(), "the API accepts connections")
    if os.environ["ALLOWED"] == "yes":
        proxy = server.create(upstream=UPSTREAM, name="any", listen=LISTEN)
        check(proxy.listen == LISTEN, "the proxy listens on " + LISTEN)
        check(round_trip(LOOPBACK) < 0.25, "it forwards, reached through 127.0.0.1")
        proxy.add_toxic(type="latency", attributes={"latency": 300})
        check(round_trip(LOOPBACK) >= 0.3, "its latency toxic applies")
        check(proxy.destroy(), "it is deleted")
    else:
        try:
            server.create(upstream=UPSTREAM, name="any", listen=LISTEN)
            check(False, "a proxy on 0.0.0.0 is refused")
        except InvalidToxic as e:
            check("--allow-listen" in str(e), "a proxy on 0.0.0.0 is refused with 400, saying why: %s" % e)
        check("any" not in server.proxies(), "no proxy was made")
    print("ok: done")


if __name__ == "__main__":
    main()
