"""A gRPC server and client (Python grpcio) for tests/grpc.rs, without generated code: methods
take and return raw bytes.

  grpc_peer.py serve            serves weir.Test on a free port, prints "port N", runs until killed
  grpc_peer.py call ADDR CASES  runs the calls (comma-separated cases) through ADDR and prints
                                their outcomes as one JSON object
"""
import json
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "weir.Test"


def unary(request, context):
    if request.startswith(b"sleep:"):
        time.sleep(float(request[6:]))
        return b"slept"
    if request.startswith(b"peer:"):
        time.sleep(float(request[5:]))
        return context.peer().encode()
    if request == b"fail":
        context.set_trailing_metadata((("x-detail", "on purpose"),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request: fail")
    peer_meta = dict(context.invocation_metadata())
    return b"echo:" + request + b"|" + peer_meta.get("x-forwarded-for", "-").encode()


def server_stream(request, context):
    count, size = (int(x) for x in request.decode().split(","))
    for i in range(count):
        yield (b"%06d" % i) + b"x" * max(0, size - 6)


def client_stream(request_iterator, context):
    count = 0
    total = 0
    for message in request_iterator:
        count += 1
        total += len(message)
    return f"{count} messages, {total} bytes".encode()


def bidi(request_iterator, context):
    for message in request_iterator:
        yield b"re:" + message


def serve():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"port {port}", flush=True)
    server.wait_for_termination()


def status_of(error):
    return {
        "code": error.code().name,
        "details": error.details(),
        "trailers": {k: v for k, v in (error.trailing_metadata() or ())},
    }


def call(channel, case):
    method = lambda kind, name: getattr(channel, kind)(f"/{SERVICE}/{name}")
    out = {}
    try:
        if case == "unary":
            reply, c = method("unary_unary", "Unary").with_call(b"hello", timeout=10)
            out = {"reply": reply.decode(), "code": c.code().name}
        elif case == "fail":
            method("unary_unary", "Unary")(b"fail", timeout=10)
        elif case == "deadline":
            started = time.time()
            try:
                method("unary_unary", "Unary")(b"sleep:3", timeout=0.5)
            finally:
                out["elapsed"] = time.time() - started
        elif case == "server_stream":
            replies = list(method("unary_stream", "ServerStream")(b"500,1000", timeout=20))
            out = {"count": len(replies), "bytes": sum(map(len, replies)),
                   "ordered": all(r.startswith(b"%06d" % i) for i, r in enumerate(replies))}
        elif case == "client_stream":
            messages = (b"m" * 10_000 for _ in range(300))
            reply = method("stream_unary", "ClientStream")(messages, timeout=20)
            out = {"reply": reply.decode()}
        elif case == "bidi":
            # Ping-pong: each message is sent only after the answer to the previous one came
            # back, which deadlocks unless both directions stream at once.
            outbox = []
            ready = threading.Semaphore(0)
            def requests():
                for i in range(50):
                    yield b"ping %d" % i
                    if not ready.acquire(timeout=5):
                        return
            replies = []
            for reply in method("stream_stream", "Bidi")(requests(), timeout=20):
                replies.append(reply.decode())
                ready.release()
            out = {"count": len(replies), "last": replies[-1] if replies else None}
        elif case == "peers":
            # Eight calls at once, each held 0.5 s by the server: which connections carried them.
            unary_call = method("unary_unary", "Unary")
            with futures.ThreadPoolExecutor(max_workers=8) as pool:
                peers = list(pool.map(lambda _: unary_call(b"peer:0.5", timeout=10), range(8)))
            out = {"calls": len(peers), "connections": len(set(peers))}
        elif case == "slow_reader":
            # 200 MB streamed to a client that reads slowly: flow control must hold the rest
            # back at the server, not in weir.
            count = 0
            for reply in method("unary_stream", "ServerStream")(b"400,524288", timeout=60):
                count += 1
                time.sleep(0.004)
            out = {"count": count}
        elif case == "unrouted":
            channel.unary_unary("/nowhere.Svc/X")(b"x", timeout=10)
        elif case == "unavailable":
            channel.unary_unary("/weir.Dead/Unary")(b"x", timeout=10)
        else:
            raise SystemExit(f"unknown case {case}")
    except grpc.RpcError as error:
        out.update(status_of(error))
    return out


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        channel = grpc.insecure_channel(sys.argv[2])
        outcomes = {case: call(channel, case) for case in sys.argv[3].split(",")}
        print(json.dumps(outcomes), flush=True)
