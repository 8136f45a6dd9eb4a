"""An OTLP trace collector for weir's tests: decodes what it receives with the official
`opentelemetry-proto` package, over OTLP/HTTP (POST /v1/traces, protobuf, optionally gzip)
and OTLP/gRPC (grpcio's server for TraceService/Export), and prints each span as one JSON
line on standard output. Its first line is `ready HTTP_PORT GRPC_PORT` (both on 127.0.0.1).
"""

import gzip
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

LOCK = threading.Lock()


def any_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def emit(request, protocol, headers):
    """One JSON line per span of an ExportTraceServiceRequest."""
    lines = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                lines.append(json.dumps({
                    "protocol": protocol,
                    "headers": headers,
                    "resource": resource,
                    "scope": ss.scope.name,
                    "name": span.name,
                    "kind": span.kind,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "trace_state": span.trace_state,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "events": [
                        {"name": e.name, "attributes": attributes(e.attributes)}
                        for e in span.events
                    ],
                    "status_code": span.status.code,
                }))
    with LOCK:
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ok = (self.path == "/v1/traces"
              and self.headers["Content-Type"] == "application/x-protobuf")
        if ok:
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            headers = {k.lower(): v for k, v in self.headers.items()}
            emit(request, "http/protobuf", headers)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        headers = {k: v for k, v in context.invocation_metadata()}
        emit(request, "grpc", headers)
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    http_port, grpc_port = (int(p) for p in (sys.argv[1:] + ["0", "0"])[:2])
    http = ThreadingHTTPServer(("127.0.0.1", http_port), Http)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
    grpc_port = server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    server.start()
    with LOCK:
        sys.stdout.write(f"ready {http.server_address[1]} {grpc_port}\n")
        sys.stdout.flush()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
