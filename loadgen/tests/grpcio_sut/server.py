"""A small gRPC service under test, on grpcio (an independent gRPC stack), with generic handlers (no protoc).

It serves /shop.Catalog/GetProduct by calling the same method on its dependency (faultd, at FAULTD_ADDR) with a
500 ms deadline, and answers with the dependency's message or passes its status through. Each call it answers is
logged on stdout as `call STATUS_NAME`, so the test can hold loadgen's outcome classes against it. It prints
`listening PORT` once ready and stops when its stdin closes.
"""

import os
import sys
import threading
from concurrent import futures

import grpc

METHOD = "/shop.Catalog/GetProduct"
lock = threading.Lock()


def log(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main():
    dependency = grpc.insecure_channel(
        os.environ["FAULTD_ADDR"], options=[("grpc.enable_http_proxy", 0)]
    )
    get_product = dependency.unary_unary(METHOD)

    def handle(request, context):
        try:
            reply = get_product(request, timeout=0.5)
        except grpc.RpcError as e:
            log("call " + e.code().name)
            context.abort(e.code(), e.details() or "")
        log("call OK")
        return reply

    handler = grpc.method_handlers_generic_handler(
        "shop.Catalog", {"GetProduct": grpc.unary_unary_rpc_method_handler(handle)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    log("listening %d" % port)
    sys.stdin.read()
    server.stop(1).wait()
    log("stopped")


if __name__ == "__main__":
    main()
