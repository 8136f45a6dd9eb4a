"""An HTTP/3 client for tests/h3.rs, on aioquic (PyPI): one QUIC connection, request groups run
one after the other, the requests of a group at once, each on its own stream.

Reads a plan as JSON from argv[1]:
  {"port": N, "server_name": "...", "ca": "path", "groups": [[REQUEST, ...], ...],
   "ready_file": "path" (optional: written after the first group),
   "go_file": "path" (optional: the second group waits for it),
   "resume": [REQUEST, ...] (optional: then a second connection resumes the first's TLS session
   and sends these as 0-RTT data)}
REQUEST: {"method", "path", "headers": [[name, value], ...], "body_size": N (a pattern of N
bytes), "body_text": "...", "body_hex": "...", "reset_after": N (send N body bytes, then reset the stream),
"stop_after": N (read N body bytes, then ask weir to stop sending), "literal_headers": true
(encode the head by hand, for blocks larger than aioquic's encoder takes)}
Prints JSON: {"max_streams_bidi": N, "closed": null or the connection's close code,
"goaway": whether weir sent GOAWAY on its control stream,
"groups": [[RESULT, ...], ...], "resumed": {"results": [RESULT, ...], "session_resumed",
"early_data_accepted"} with "resume"}, RESULT: {"status", "headers", "trailers", "body_len",
"body_md5", "body_text", "reset"}.
"""

import asyncio
import hashlib
import json
import os
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived, StreamReset

H3_REQUEST_CANCELLED = 0x10C


def qpack_int(prefix_bits, first, value):
    """RFC 9204 4.1.1 (RFC 7541 5.1): `value` with an N-bit prefix, `first` the byte's flags."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value):
    """RFC 9000 16: a QUIC variable-length integer."""
    for length, tag in ((1, 0x00), (2, 0x40), (4, 0x80), (8, 0xC0)):
        if value < 1 << (8 * length - 2):
            data = value.to_bytes(length, "big")
            return bytes([data[0] | tag]) + data[1:]
    raise ValueError(value)


def literal_headers_frame(headers):
    """A HEADERS frame whose fields are all literal lines with literal names (RFC 9204 4.5.6),
    no dynamic table: aioquic's own encoder refuses blocks over a few KiB."""
    block = b"\x00\x00"
    for name, value in headers:
        block += qpack_int(3, 0x20, len(name)) + name
        block += qpack_int(7, 0x00, len(value)) + value
    return varint(0x01) + varint(len(block)) + block


def read_varint(data, at):
    """RFC 9000 16: the integer at `at` and where the next field starts, or None if cut short."""
    if at >= len(data):
        return None
    length = 1 << (data[at] >> 6)
    if at + length > len(data):
        return None
    value = data[at] & 0x3F
    for byte in data[at + 1:at + length]:
        value = (value << 8) | byte
    return value, at + length


def has_goaway(control):
    """Whether the server's control stream (RFC 9114 6.2.1: type 0x00, then frames) holds a
    GOAWAY frame (type 0x07, section 7.2.6). aioquic takes GOAWAY without telling."""
    first = read_varint(control, 0)
    if first is None or first[0] != 0x00:
        return False
    at = first[1]
    while True:
        kind = read_varint(control, at)
        length = kind and read_varint(control, kind[1])
        if not length or length[1] + length[0] > len(control):
            return False
        if kind[0] == 0x07:
            return True
        at = length[1] + length[0]


def pattern(size):
    """`size` bytes of `abc...z` repeated, as the test upstream's `/big/N` answers."""
    return (b"abcdefghijklmnopqrstuvwxyz" * (size // 26 + 1))[:size]


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.streams = {}
        self.closed = None
        self.handshake = {}
        self.server_uni = {}

    def goaway(self):
        return any(has_goaway(data) for data in self.server_uni.values())

    def quic_event_received(self, event):
        # Server-initiated unidirectional streams (RFC 9000 2.1): the control stream is one.
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            self.server_uni[event.stream_id] = self.server_uni.get(event.stream_id, b"") + event.data
        if isinstance(event, HandshakeCompleted):
            self.handshake = {
                "session_resumed": event.session_resumed,
                "early_data_accepted": event.early_data_accepted,
            }
        if isinstance(event, ConnectionTerminated):
            self.closed = event.error_code
            for state in self.streams.values():
                if not state["done"].done():
                    state["done"].set_result(False)
        if isinstance(event, StreamReset) and event.stream_id in self.streams:
            state = self.streams[event.stream_id]
            state["reset"] = True
            if not state["done"].done():
                state["done"].set_result(False)
        for ev in self.http.handle_event(event):
            state = self.streams.get(ev.stream_id)
            if state is None:
                continue
            if isinstance(ev, HeadersReceived):
                if state["headers"] is None:
                    state["headers"] = ev.headers
                else:
                    state["trailers"] = ev.headers
            elif isinstance(ev, DataReceived):
                state["body"] += ev.data
                stop = state["spec"].get("stop_after")
                if stop is not None and len(state["body"]) >= stop and not state["done"].done():
                    self._quic.stop_stream(ev.stream_id, H3_REQUEST_CANCELLED)
                    self.transmit()
                    state["done"].set_result(False)
            if getattr(ev, "stream_ended", False) and not state["done"].done():
                state["done"].set_result(True)

    async def request(self, spec, authority):
        stream_id = self._quic.get_next_available_stream_id()
        state = {
            "spec": spec,
            "headers": None,
            "trailers": None,
            "body": b"",
            "reset": False,
            "done": asyncio.get_running_loop().create_future(),
        }
        self.streams[stream_id] = state
        body = b""
        if "body_size" in spec:
            body = pattern(spec["body_size"])
        elif "body_text" in spec:
            body = spec["body_text"].encode()
        elif "body_hex" in spec:
            body = bytes.fromhex(spec["body_hex"])
        headers = [
            (b":method", spec.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", spec.get("path", "/").encode()),
        ]
        headers += [(k.lower().encode(), v.encode()) for k, v in spec.get("headers", [])]
        if spec.get("literal_headers"):
            # Past aioquic's encoder: the frame is written onto the stream as it is.
            self.http._get_or_create_stream(stream_id)
            self._quic.send_stream_data(stream_id, literal_headers_frame(headers), end_stream=True)
            self.transmit()
            await asyncio.wait_for(state["done"], 60)
            return result(state)
        reset_after = spec.get("reset_after")
        if reset_after is not None:
            self.http.send_headers(stream_id, headers, end_stream=False)
            self.http.send_data(stream_id, body[:reset_after], end_stream=False)
            self.transmit()
            await asyncio.sleep(0.2)
            self._quic.reset_stream(stream_id, H3_REQUEST_CANCELLED)
            self.transmit()
            await asyncio.sleep(0.2)
            return result(state)
        self.http.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.http.send_data(stream_id, body, end_stream=True)
        self.transmit()
        await asyncio.wait_for(state["done"], 60)
        return result(state)


def result(state):
    headers = {}
    status = None
    for name, value in state["headers"] or []:
        name, value = name.decode(), value.decode()
        if name == ":status":
            status = int(value)
        elif name in headers:
            headers[name] += ", " + value
        else:
            headers[name] = value
    trailers = {k.decode(): v.decode() for k, v in state["trailers"] or []} or None
    body = state["body"]
    try:
        text = body.decode() if len(body) <= 2_000_000 else None
    except UnicodeDecodeError:
        text = None
    return {
        "status": status,
        "headers": headers,
        "trailers": trailers,
        "body_len": len(body),
        "body_md5": hashlib.md5(body).hexdigest(),
        "body_text": text,
        "reset": state["reset"],
    }


async def main(plan):
    configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    configuration.load_verify_locations(plan["ca"])
    configuration.server_name = plan["server_name"]
    authority = "%s:%d" % (plan["server_name"], plan["port"])
    out = {"groups": []}
    tickets = []
    async with connect(
        "127.0.0.1",
        plan["port"],
        configuration=configuration,
        create_protocol=Client,
        session_ticket_handler=tickets.append,
    ) as client:
        out["max_streams_bidi"] = client._quic._remote_max_streams_bidi
        for index, group in enumerate(plan["groups"]):
            if index == 1 and plan.get("go_file"):
                while not os.path.exists(plan["go_file"]):
                    await asyncio.sleep(0.05)
            results = await asyncio.gather(*(client.request(spec, authority) for spec in group))
            out["groups"].append(results)
            if index == 0 and plan.get("ready_file"):
                with open(plan["ready_file"], "w") as f:
                    f.write("ready")
        out["closed"] = client.closed
        out["goaway"] = client.goaway()
    if plan.get("resume"):
        # A second connection resuming the first's session, its request sent as 0-RTT data.
        configuration.session_ticket = tickets[-1] if tickets else None
        async with connect(
            "127.0.0.1",
            plan["port"],
            configuration=configuration,
            create_protocol=Client,
            wait_connected=False,
        ) as client:
            results = await asyncio.gather(
                *(client.request(spec, authority) for spec in plan["resume"])
            )
            out["resumed"] = {
                "results": results,
                "session_resumed": client.handshake.get("session_resumed"),
                "early_data_accepted": client.handshake.get("early_data_accepted"),
            }
    print(json.dumps(out))


asyncio.run(main(json.loads(sys.argv[1])))
