"""Abusive HTTP/3 clients for tests/h3.rs, on aioquic (PyPI).

Reads a plan as JSON from argv[1]:
  {"port": N, "server_name": "...", "ca": "path", "mode": "resets" | "flood", ...}
mode "resets", with "resets": N: one connection opens N request streams, each reset right
  after its HEADERS (both in one packet: the rapid reset of CVE-2023-44487), in batches under
  the stream limit, then asks for /ping. Prints {"closed": null or the close code,
  "reason": the close reason, "ping": the answer's body or null}.
mode "flood", with "half_open": K: K handshakes started from K sockets and never finished
  (their first flight sent, nothing read), then an ordinary client asks for /ping. Prints
  {"retried": whether that client got a Retry (RFC 9000, section 17.2.5), "ping": the body}.
"""

import asyncio
import json
import socket
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated
from aioquic.quic.logger import QuicLogger

H3_REQUEST_CANCELLED = 0x10C
BATCH = 50


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.closed = None
        self.reason = None
        self.terminated = asyncio.get_running_loop().create_future()
        self.bodies = {}
        self.ended = {}

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.closed = event.error_code
            self.reason = event.reason_phrase
            for done in list(self.ended.values()) + [self.terminated]:
                if not done.done():
                    done.set_result(None)
        for ev in self.http.handle_event(event):
            if isinstance(ev, DataReceived) and ev.stream_id in self.bodies:
                self.bodies[ev.stream_id] += ev.data
            if getattr(ev, "stream_ended", False) and ev.stream_id in self.ended:
                if not self.ended[ev.stream_id].done():
                    self.ended[ev.stream_id].set_result(None)

    def headers(self, authority, path):
        return [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
                (b":path", path.encode())]

    async def get(self, authority, path):
        """The body of GET `path`, or None when the connection ends first."""
        stream_id = self._quic.get_next_available_stream_id()
        self.bodies[stream_id] = b""
        self.ended[stream_id] = asyncio.get_running_loop().create_future()
        self.http.send_headers(stream_id, self.headers(authority, path), end_stream=True)
        self.transmit()
        await asyncio.wait_for(self.ended[stream_id], 20)
        return None if self.closed is not None else self.bodies[stream_id].decode()

    async def reset_streams(self, authority, count):
        for start in range(0, count, BATCH):
            for _ in range(min(BATCH, count - start)):
                if self.closed is not None:
                    return
                stream_id = self._quic.get_next_available_stream_id()
                self.http.send_headers(stream_id, self.headers(authority, "/ping"), end_stream=False)
                self._quic.reset_stream(stream_id, H3_REQUEST_CANCELLED)
            self.transmit()
            # Room for weir's MAX_STREAMS before the next batch.
            await asyncio.sleep(0.2)


def configuration(plan):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.load_verify_locations(plan["ca"])
    config.server_name = plan["server_name"]
    return config


async def resets(plan, authority):
    async with connect("127.0.0.1", plan["port"], configuration=configuration(plan), create_protocol=Client) as client:
        await client.reset_streams(authority, plan["resets"])
        ping = None
        if client.closed is None:
            try:
                ping = await client.get(authority, "/ping")
            except asyncio.TimeoutError:
                ping = None
        if plan["resets"] > 64 and client.closed is None:
            await asyncio.wait([client.terminated], timeout=5)
        return {"closed": client.closed, "reason": client.reason, "ping": ping}


def start_half_open(plan, count):
    """`count` handshakes that stop after the client's first flight; their sockets are kept
    open (and unread) so nothing answers weir."""
    sockets = []
    for _ in range(count):
        quic = QuicConnection(configuration=configuration(plan))
        quic.connect(("127.0.0.1", plan["port"]), now=time.time())
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for data, addr in quic.datagrams_to_send(now=time.time()):
            sock.sendto(data, addr)
        sockets.append(sock)
    return sockets


async def flood(plan, authority):
    sockets = start_half_open(plan, plan["half_open"])
    await asyncio.sleep(0.5)
    config = configuration(plan)
    config.quic_logger = QuicLogger()
    async with connect("127.0.0.1", plan["port"], configuration=config, create_protocol=Client) as client:
        ping = await client.get(authority, "/ping")
    events = [e for trace in config.quic_logger.to_dict()["traces"] for e in trace["events"]]
    retried = any(e["name"] == "transport:packet_received"
                  and e["data"].get("header", {}).get("packet_type") == "retry" for e in events)
    for sock in sockets:
        sock.close()
    return {"retried": retried, "ping": ping}


async def main(plan):
    authority = "%s:%d" % (plan["server_name"], plan["port"])
    run = {"resets": resets, "flood": flood}[plan["mode"]]
    print(json.dumps(await run(plan, authority)))


asyncio.run(main(json.loads(sys.argv[1])))
