"""faultd's Toxiproxy API driven by the stock toxiproxy-python client, unmodified.

Run by faultd/tests/toxiproxy_clients.rs with FAULTD_TOXIPROXY (the API's host:port) and ECHO_UPSTREAM (an echo
server's host:port) set. Walks a proxy's life cycle and checks the effects on real traffic over 127.0.0.1.
"""

import os
import socket
import sys
import time

from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

API_HOST, API_PORT = os.environ["FAULTD_TOXIPROXY"].rsplit(":", 1)
UPSTREAM = os.environ["ECHO_UPSTREAM"]

# Every toxic type with attributes to create it with and a change to make to it.
TOXICS = [
    ("latency", {"latency": 300, "jitter": 0}, {"jitter": 5}),
    ("bandwidth", {"rate": 100}, {"rate": 200}),
    ("slow_close", {"delay": 100}, {"delay": 200}),
    ("timeout", {"timeout": 100}, {"timeout": 200}),
    ("reset_peer", {"timeout": 100}, {"timeout": 200}),
    ("limit_data", {"bytes": 100}, {"bytes": 200}),
    ("slicer", {"average_size": 10, "size_variation": 5, "delay": 100}, {"delay": 200}),
    ("stall", {}, {}),
    ("connect_delay", {"delay": 100}, {"delay": 200}),
]


def addr(listen):
    host, port = listen.rsplit(":", 1)
    return (host, int(port))


def round_trip(listen, payload=b"PING"):
    """Seconds for one echo through the proxy, on a fresh connection."""
    with socket.create_connection(addr(listen), timeout=5) as s:
        start = time.monotonic()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            assert chunk, "connection closed before the echo"
            got += chunk
        assert got == payload
        return time.monotonic() - start


def check(condition, what):
    if not condition:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)
    print("ok: " + what)


def main():
    server = Toxiproxy()
    server.update_api_consumer(API_HOST, int(API_PORT))
    check(server.running(), "the API accepts connections")
    check(server.version().startswith(b"2."), "version reads as Toxiproxy 2.x")
    server.destroy_all()

    populated = server.populate([{"name": "py_pop", "upstream": UPSTREAM, "listen": "127.0.0.1:0"}])
    check(len(populated) == 1 and populated[0].name == "py_pop", "populate creates a proxy")
    check(round_trip(server.get_proxy("py_pop").listen) < 0.25, "a populated proxy forwards")

    proxy = server.create(upstream=UPSTREAM, name="py_db")
    check(proxy.enabled and proxy.listen.endswith(":" + proxy.listen.rsplit(":", 1)[1]), "create answers the proxy")
    check(not proxy.listen.endswith(":0"), "the listen address carries the port picked")
    try:
        APIConsumer.post("/proxies", json={"name": "py_db", "upstream": UPSTREAM})
        check(False, "a duplicate name is refused")
    except ProxyExists:
        check(True, "a duplicate name is refused with 409")
    check(set(server.proxies()) == {"py_pop", "py_db"}, "list shows both proxies")
    check(round_trip(proxy.listen) < 0.25, "a new proxy forwards quickly")

    for kind, attributes, change in TOXICS:
        proxy.add_toxic(type=kind, attributes=attributes)
        name = kind + "_downstream"
        toxic = proxy.get_toxic(name)
        check(toxic is not None and toxic.type == kind and toxic.stream == "downstream", kind + " is added with the defaults")
        check(all(toxic.attributes[k] == v for k, v in attributes.items()), kind + " reads back its attributes")
        check(toxic.toxicity == 1.0, kind + " has toxicity 1.0")
        updated = APIConsumer.post("/proxies/py_db/toxics/" + name, json={"attributes": change}).json()
        check(all(updated["attributes"][k] == v for k, v in change.items()), kind + " is updated")
        check(proxy.destroy_toxic(name), kind + " is removed")
        check(proxy.get_toxic(name) is None, kind + " is gone")

    try:
        proxy.add_toxic(type="teleport")
        check(False, "an unknown toxic type is refused")
    except InvalidToxic:
        check(True, "an unknown toxic type is refused with 400")
    try:
        APIConsumer.get("/proxies/nope")
        check(False, "an unknown proxy is 404")
    except NotFound:
        check(True, "an unknown proxy is 404")

    proxy.add_toxic(type="latency", attributes={"latency": 300})
    check(round_trip(proxy.listen) >= 0.3, "latency 300 ms makes a round trip take 300 ms or more")
    proxy.destroy_toxic("latency_downstream")
    check(round_trip(proxy.listen) < 0.25, "without the toxic the round trip is quick again")

    proxy.add_toxic(type="reset_peer", attributes={"timeout": 0})
    try:
        with socket.create_connection(addr(proxy.listen), timeout=5) as s:
            s.sendall(b"PING")
            data = s.recv(100)
            check(False, "reset_peer resets (got %r)" % data)
    except ConnectionResetError:
        check(True, "reset_peer resets the connection")
    proxy.destroy_toxic("reset_peer_downstream")

    with proxy.down():
        try:
            socket.create_connection(addr(proxy.listen), timeout=5).close()
            check(False, "a disabled proxy refuses connects")
        except ConnectionRefusedError:
            check(True, "a disabled proxy refuses connects")
    check(round_trip(proxy.listen) < 0.25, "an enabled proxy forwards again")

    proxy.add_toxic(type="timeout", attributes={"timeout": 0})
    proxy.disable()
    check(server.reset(), "reset answers")
    again = server.get_proxy("py_db")
    check(again.enabled and again.toxics() == {}, "reset enables every proxy and removes every toxic")
    check(round_trip(again.listen) < 0.25, "after reset the proxy forwards quickly")

    check(proxy.destroy(), "delete answers")
    check(server.get_proxy("py_db") is None, "a deleted proxy is gone")
    server.destroy_all()
    check(server.proxies() == {}, "every proxy deleted")


if __name__ == "__main__":
    main()
