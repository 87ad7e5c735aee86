"""shop.Catalog: a team's own gRPC service whose messages come from its .proto file, as faultline meets it.

Its messages are the classes protoc generates from catalog.proto, compiled when the service starts (grpcio-tools'
`grpc.protos_and_services`): nothing in it reads or writes protobuf by hand, so what it decodes is what protoc
says the file means. One unary method, /shop.Catalog/GetProduct: an id outside 1..1000 is INVALID_ARGUMENT;
otherwise it asks its inventory (/shop.Inventory/Check, gRPC, at INVENTORY_URL) for the product's stock and answers
the product with the stock, the warehouse and the restock time the inventory gave, its price in the request's
currency (EUR by default) and the request's tags. An inventory that fails or is late makes the answer UNAVAILABLE
with a `grpc-message` that says so, and that carries what the inventory's error details said (gRPC's richer error
model, read with grpcio-status and googleapis-common-protos): `inventory: UNAVAILABLE (ErrorInfo STOCK_DB_DOWN
from inventory.shop; retry in 1.500s)`.

Environment: PORT (to listen on 127.0.0.1), INVENTORY_URL (http://HOST:PORT), CALL_TIMEOUT_MS (default 500).
`serving shop.Catalog on HOST:PORT` says it is ready.
"""

import os
import signal
import sys
from concurrent import futures

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
protos, services = grpc.protos_and_services("catalog.proto")


class Catalog(services.CatalogServicer):
    def __init__(self, inventory, timeout):
        self.inventory = inventory
        self.timeout = timeout

    def GetProduct(self, request, context):
        if not 1 <= request.id <= 1000:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"id {request.id} is not a product")
        try:
            stock = self.inventory.Check(
                protos.StockRequest(product_id=request.id), timeout=self.timeout
            )
        except grpc.RpcError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"inventory: {e.code().name}{details_of(e)}")
        product = protos.Product(
            id=request.id,
            name=f"product {request.id}",
            price=protos.Money(cents=request.id * 100, currency=request.locale.currency or "EUR"),
            stock=stock.available,
            warehouse=stock.warehouse,
            tags=list(request.tags),
        )
        if stock.HasField("restocked"):
            product.restocked.CopyFrom(stock.restocked)
        return product


def details_of(error):
    """What the error's details say, in words: ` (ErrorInfo REASON from DOMAIN; retry in 1.500s)`, or nothing."""
    status = rpc_status.from_call(error)
    if status is None:
        return ""
    said = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            said.append(f"ErrorInfo {info.reason} from {info.domain}")
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            said.append(f"retry in {retry.retry_delay.ToTimedelta().total_seconds():.3f}s")
    return f" ({'; '.join(said)})" if said else ""


def main():
    port = int(os.environ["PORT"])
    inventory_addr = os.environ["INVENTORY_URL"].split("://", 1)[-1].rstrip("/")
    timeout = int(os.environ.get("CALL_TIMEOUT_MS", "500")) / 1000
    channel = grpc.insecure_channel(inventory_addr)
    inventory = services.InventoryStub(channel)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    services.add_CatalogServicer_to_server(Catalog(inventory, timeout), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    print(f"serving shop.Catalog on 127.0.0.1:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
