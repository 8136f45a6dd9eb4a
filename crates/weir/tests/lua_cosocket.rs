//! Cosockets (docs/lua.md): the same scripts run by Debian's nginx with lua-nginx-module 0.10
//! and by weir, status and body compared: Debian's `lua-nginx-redis` (lua-resty-redis 0.27)
//! unchanged against a real `redis-server` (one each, so both start from an empty store), and
//! raw cosockets against an in-test TCP server. Then what only weir is asked: keep-alive
//! reuse across requests, a wait that leaves the worker to other requests, TLS.
//!
//! Each case names the section of lua-nginx-module's README ("Nginx API for Lua",
//! `ngx.socket.tcp` and the `tcpsock:*` methods) or of lua-resty-redis's README whose
//! behaviour it checks.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

/// Opens the connection every raw case starts with: to the in-test server (`?peer=PORT`),
/// which acts on the first line it reads (see [`peer_server`]).
const OPEN: &str = r#"
local sock = ngx.socket.tcp()
sock:settimeout(2000)
local ok, err = sock:connect("127.0.0.1", tonumber(ngx.var.arg_peer))
if not ok then ngx.say("connect: ", err) return end
"#;

/// Opens a UDP cosocket to the in-test UDP server (`?udp=PORT`), which acts on each
/// datagram (see [`udp_server`]).
const UDP: &str = r#"
local sock = ngx.socket.udp()
sock:settimeout(2000)
local ok, err = sock:setpeername("127.0.0.1", tonumber(ngx.var.arg_udp))
if not ok then ngx.say("setpeername: ", err) return end
"#;

/// A lua-resty-redis client on this server's Redis (`?redis=PORT`).
const REDIS: &str = r##"
local redis = require "nginx.redis"
local red = redis:new()
red:set_timeout(2000)
local ok, err = red:connect("127.0.0.1", tonumber(ngx.var.arg_redis))
if not ok then ngx.say("connect: ", err) return end
local function show(...)
  local out = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) == "table" then
      local items = {}
      for j, item in ipairs(v) do
        if type(item) == "table" then item = "{" .. tostring(item[1]) .. "," .. tostring(item[2]) .. "}" end
        items[j] = tostring(item)
      end
      v = "[" .. table.concat(items, " ") .. "]"
    elseif v == ngx.null then
      v = "null"
    end
    out[#out + 1] = tostring(v)
  end
  ngx.say(table.concat(out, " "))
end
"##;

/// One case: its name (the path `/case/NAME`), whether it starts with [`REDIS`] or [`OPEN`],
/// its script, and the scripts of its phases (`rewrite`, `access`, `header_filter`; a `lua`
/// middleware in weir, `*_by_lua_file` in nginx; an `X-Err` header is compared too).
struct Case {
    name: &'static str,
    prelude: &'static str,
    script: &'static str,
    phases: &'static [(&'static str, &'static str)],
}

const fn raw(name: &'static str, script: &'static str) -> Case {
    Case {
        name,
        prelude: OPEN,
        script,
        phases: &[],
    }
}

const fn redis(name: &'static str, script: &'static str) -> Case {
    Case {
        name,
        prelude: REDIS,
        script,
        phases: &[],
    }
}

const fn udp(name: &'static str, script: &'static str) -> Case {
    Case {
        name,
        prelude: UDP,
        script,
        phases: &[],
    }
}

const fn plain(name: &'static str, script: &'static str) -> Case {
    Case {
        name,
        prelude: "",
        script,
        phases: &[],
    }
}

const CASES: &[Case] = &[
    // tcpsock:receive: "a number-like argument ... will not return until it reads exactly
    // this size of data"; "*l": "the CR and LF characters are not included ... all embedded
    // CR characters are ignored"; no argument is "*l".
    raw(
        "receive_size_and_lines",
        r#"sock:send("lines\n")
ngx.say(sock:receive(4)) ngx.say(sock:receive("*l")) ngx.say(sock:receive())
ngx.say(sock:receive("3")) ngx.say(sock:receive(0) == "")"#,
    ),
    // "*a": "reads from the socket until the connection is closed".
    raw(
        "receive_all",
        r#"sock:send("lines\n") local all = sock:receive("*a") ngx.say(#all, " ", (all:gsub("\r", "\\r")))"#,
    ),
    // "In case of error, it returns nil, an error description and the partial data"; the
    // connection is closed then, so a later call answers "closed".
    raw(
        "receive_closed_by_peer",
        r#"sock:send("short\n")
ngx.say(sock:receive(100)) ngx.say(sock:receive()) ngx.say(sock:send("x"))"#,
    ),
    raw(
        "receive_line_closed_by_peer",
        r#"sock:send("short\n") ngx.say(sock:receive("*l")) ngx.say(sock:receive("*l"))"#,
    ),
    // "Since the v0.8.8 release, this method no longer automatically closes the current
    // connection when the read timeout error happens."
    raw(
        "receive_timeout_keeps_the_connection",
        r#"sock:settimeout(150) sock:send("hang\n")
ngx.say(sock:receive(100)) ngx.say(sock:receive("*l"))
sock:settimeout(1000) ngx.say(sock:receive())"#,
    ),
    raw(
        "settimeouts",
        r#"sock:settimeouts(1000, 1000, 100) sock:send("hang\n") ngx.say(sock:receive("*a"))"#,
    ),
    // What a receive asks for arriving in pieces: part buffered, the rest after a wait (or
    // none); the read timeout counts from each call's start, however long an earlier wait
    // of the connection was (weir's timer, set for that one, ticks first and is set again).
    raw(
        "receive_across_waits",
        r#"sock:settimeout(1000) sock:send("slow\n")
ngx.say(sock:receive()) ngx.say(sock:receive()) ngx.say(sock:receive(5)) ngx.say(sock:receive(1) == "\n")
ngx.update_time() local started = ngx.now()
ngx.say(sock:receive())
ngx.update_time() ngx.say(ngx.now() - started >= 0.95)"#,
    ),
    raw(
        "receiveuntil_across_waits",
        r#"sock:send("slow\n")
local reader = sock:receiveuntil("line\nsec") ngx.say(reader()) ngx.say(sock:receive())
local inclusive = sock:receiveuntil("rd", { inclusive = true }) ngx.say(inclusive())"#,
    ),
    // tcpsock:send "will not return until all the data has been flushed into the system
    // socket send buffer": more than the buffers hold, to a peer that reads late.
    raw(
        "send_waits_for_a_slow_reader",
        r#"local big = string.rep("x", 8 * 1024 * 1024)
ngx.say(sock:send({ "drain\n", big, "\nend\n" })) ngx.say(sock:receive())"#,
    ),
    // tcpsock:receiveuntil: "returns the received data right before the pattern"; the
    // iterator "can be called multiple times"; with `inclusive`, the pattern is kept.
    raw(
        "receiveuntil",
        r#"sock:send("parts\n")
local reader = sock:receiveuntil("--b--")
ngx.say(reader()) ngx.say(reader())
local inclusive = sock:receiveuntil("--b--", { inclusive = true })
ngx.say(inclusive()) ngx.say(sock:receive("*a"))"#,
    ),
    // "When called with a size argument, ... each call returns at most size bytes ... the
    // last call (boundary found) returns nil, nil" and the iterator is reset.
    raw(
        "receiveuntil_size",
        r#"sock:send("parts\n")
local reader = sock:receiveuntil("--b--")
for _ = 1, 2 do
  while true do
    local data, err, partial = reader(4)
    if not data then ngx.say("done ", tostring(err), " ", tostring(partial)) break end
    ngx.say("[", data, "]")
  end
end"#,
    ),
    // tcpsock:receiveany: "returns any data received by the connected socket, at most max
    // bytes" and waits only when nothing has been received yet.
    raw(
        "receiveany",
        r#"sock:send("parts\n") ngx.sleep(0.1)
ngx.say(sock:receiveany(5)) ngx.say(sock:receiveany(100)) ngx.say(sock:receiveany(10))
ngx.say(pcall(sock.receiveany, sock, 0))"#,
    ),
    raw(
        "receiveuntil_closed",
        r#"sock:send("parts\n") local reader = sock:receiveuntil("--nowhere--") ngx.say(reader())"#,
    ),
    // tcpsock:send: "the data ... can be a Lua string or a (nested) Lua table holding
    // string fragments"; it returns the number of bytes sent.
    raw(
        "send_nested_table",
        r#"ngx.say(sock:send({"ec", {"ho", {"\n"}}, 42, "\n", 1.5, "\n"}))
ngx.say(sock:receive()) ngx.say(sock:receive())"#,
    ),
    // Coroutines the script makes may wait inside (lua-resty-http reads bodies so, through
    // coroutine.wrap): the cosocket's wait passes up through them.
    raw(
        "receive_inside_coroutines",
        r#"sock:send("lines\n")
local lines = coroutine.wrap(function()
  while true do
    local line = sock:receive()
    if not line then return nil end
    coroutine.yield(line)
  end
end)
for line in lines do ngx.say("[", line, "]") end
local co = coroutine.create(function(a) ngx.sleep(0.01) local b = coroutine.yield(a + 1) ngx.sleep(0.01) return b * 2 end)
ngx.say(coroutine.resume(co, 1)) ngx.say(coroutine.resume(co, 5)) ngx.say(coroutine.resume(co))"#,
    ),
    // tcpsock:close: "returns 1 ... in case of error, nil and a string describing it".
    raw(
        "close_twice",
        r#"ngx.say(sock:close()) ngx.say(sock:close()) ngx.say(sock:send("x"))
ngx.say(sock:receive()) ngx.say(sock:getreusedtimes()) ngx.say(sock:setkeepalive())"#,
    ),
    // ngx.socket.connect: "a shortcut for combining ngx.socket.tcp() and the connect()".
    raw(
        "socket_connect_shortcut",
        r#"sock:close()
local s, err = ngx.socket.connect("127.0.0.1", tonumber(ngx.var.arg_peer))
s:send("echo\n") s:send("hi\n") ngx.say(s:receive())
ngx.say(ngx.socket.connect("127.0.0.1", tonumber(ngx.var.arg_dead)))"#,
    ),
    // tcpsock:connect: "In case of error, it returns nil followed by a string describing
    // the error" ("connection refused" from the system).
    raw(
        "connect_refused",
        r#"local s = ngx.socket.tcp() ngx.say(s:connect("127.0.0.1", tonumber(ngx.var.arg_dead)))
ngx.say(s:send("x"))"#,
    ),
    // tcpsock:setkeepalive: puts the connection into the pool (keyed host:port, or the
    // `pool` option); tcpsock:getreusedtimes: "If the current connection does not come
    // from the built-in connection pool, then this method always returns 0"; "calling this
    // method ... will immediately turn the current cosocket object into the closed state".
    raw(
        "setkeepalive_and_reuse",
        r#"sock:send("echo\n")
ngx.say(sock:getreusedtimes(), " ", sock:setkeepalive(10000, 4), " ", tostring(sock:send("x")))
local again = ngx.socket.tcp()
again:connect("127.0.0.1", tonumber(ngx.var.arg_peer))
ngx.say(again:getreusedtimes())
again:send("still echo\n") ngx.say(again:receive())
again:setkeepalive()
local other = ngx.socket.tcp()
other:connect("127.0.0.1", tonumber(ngx.var.arg_peer), { pool = "elsewhere" })
ngx.say(other:getreusedtimes())
other:close()"#,
    ),
    // "unread data in buffer": a connection with bytes not read is not pooled.
    raw(
        "setkeepalive_unread_data",
        r#"sock:send("echo\n") sock:send("a\nb\n") ngx.say(sock:receive()) ngx.sleep(0.1)
ngx.say(sock:receive(1)) ngx.say(sock:setkeepalive())"#,
    ),
    // udpsock:send: "Returns 1 on success"; data "can be a Lua string, a (nested) Lua table
    // holding string fragments"; udpsock:receive: "Receives data from the UDP ... socket";
    // udpsock:close; a closed socket answers nil and "closed".
    udp(
        "udp_send_and_receive",
        r#"ngx.say(sock:send("echo hello")) ngx.say(sock:receive())
ngx.say(sock:send({"echo ", {"nested", 1, " ", 2.5}})) ngx.say(sock:receive())
ngx.say(sock:close()) ngx.say(sock:close()) ngx.say(sock:send("x")) ngx.say(sock:receive())"#,
    ),
    // "If the size argument is specified, then this method will use this size as the receive
    // buffer size" (the README's 8192 limit is 65536 in lua-nginx-module 0.10.23).
    udp(
        "udp_receive_size",
        r#"sock:send("big") ngx.say(sock:receive(10))
sock:send("big") ngx.say(#sock:receive())
sock:send("big") ngx.say(#sock:receive(100000))
sock:send("twice") ngx.say(sock:receive()) ngx.say(sock:receive())"#,
    ),
    // A read timeout answers nil and "timeout", and the socket stays usable.
    udp(
        "udp_timeout",
        r#"sock:settimeout(100) sock:send("silent") ngx.say(sock:receive())
sock:settimeout(2000) sock:send("echo after") ngx.say(sock:receive())"#,
    ),
    // tcpsock:bind: "makes the outgoing connection to a upstream server originate from the
    // specified local IP address. Only IP addresses can be specified"; the peer tells which
    // address the connection came from. An IPv6 address before an IPv4 peer and an address
    // not on this host fail at `connect`, with nginx's words.
    plain(
        "tcp_bind",
        r#"local function try(addr)
  local sock = ngx.socket.tcp() sock:settimeout(2000)
  local ok, err = sock:bind(addr)
  local c, cerr = sock:connect("127.0.0.1", tonumber(ngx.var.arg_peer))
  local seen
  if c then sock:send("whoami\n") seen = sock:receive() sock:close() end
  ngx.say(tostring(addr), ": ", tostring(ok), " ", tostring(err), " | ", tostring(c), " ", tostring(cerr), " ", tostring(seen))
end
try("127.0.0.1") try("127.0.0.3") try("::1") try("10.255.255.1")
try("nonsense") try(123) try("127.0.0.1:80")
local sock = ngx.socket.tcp()
local function raised(what, ...)
  local ok, err = pcall(sock.bind, sock, ...)
  ngx.say(tostring(ok), " ", tostring(err):find(what, 1, true) ~= nil)
end
raised("expecting 2 arguments, but got 1") raised("expecting 2 arguments, but got 3", "127.0.0.1", 80)
raised("string expected, got nil", nil)
sock:connect("127.0.0.1", tonumber(ngx.var.arg_peer))
ngx.say("connected: ", tostring(sock:bind("127.0.0.1")))
sock:close() ngx.say("closed: ", tostring(sock:bind("127.0.0.1")))"#,
    ),
    // An ICMP port unreachable for a datagram sent to nobody: "connection refused".
    plain(
        "udp_refused",
        r#"local sock = ngx.socket.udp() sock:settimeout(1000)
ngx.say(sock:setpeername("127.0.0.1", tonumber(ngx.var.arg_dead)))
ngx.say(sock:send("anyone?")) ngx.say(sock:receive())
ngx.say(sock:send("again?")) ngx.say(sock:receive()) ngx.say(sock:close())"#,
    ),
    // udpsock:setpeername: "host ... port ... unix domain socket file path ... prefixed by
    // unix:"; a socket not yet given a peer is closed; setpeername again replaces the peer.
    plain(
        "udp_setpeername",
        r#"local sock = ngx.socket.udp()
ngx.say(sock:send("x")) ngx.say(sock:receive()) ngx.say(sock:close())
ngx.say(sock:setpeername("127.0.0.1", 70000))
ngx.say(sock:setpeername("unix:" .. ngx.var.arg_dgram)) ngx.say(sock:send({"unix", " datagram"}))
ngx.say(sock:setpeername("127.0.0.1", tonumber(ngx.var.arg_udp))) sock:send("echo again") ngx.say(sock:receive())
ngx.say(sock:setpeername("unix:/nonexistent/dgram.sock"))
sock:setpeername("127.0.0.1", tonumber(ngx.var.arg_udp)) sock:send("echo sized")
ngx.say(sock:receive(4))"#,
    ),
    // ngx.socket.udp's context is the TCP one's: not header_filter.
    Case {
        name: "header_filter_refuses_udp",
        prelude: "",
        script: r#"ngx.say("body")"#,
        phases: &[(
            "header_filter",
            r#"local ok, err = pcall(ngx.socket.udp) ngx.header["X-Err"] = tostring(ok) .. " " .. tostring(err)"#,
        )],
    },
    // A UDP cosocket in a timer.
    plain(
        "udp_in_a_timer",
        r#"ngx.timer.at(0, function(premature, port)
  local sock = ngx.socket.udp() sock:settimeout(2000)
  sock:setpeername("127.0.0.1", port) sock:send("echo from a timer")
  ngx.shared.t:set("udp", (sock:receive()))
end, tonumber(ngx.var.arg_udp))
for _ = 1, 100 do if ngx.shared.t:get("udp") then break end ngx.sleep(0.01) end
ngx.say(ngx.shared.t:get("udp"))"#,
    ),
    // ngx.socket.tcp's context: rewrite, access, content, timers, not header_filter, where
    // nginx raises "API disabled in the context of header_filter_by_lua*".
    Case {
        name: "header_filter_refuses_cosockets",
        prelude: "",
        script: r#"ngx.say("body")"#,
        phases: &[(
            "header_filter",
            r#"local ok, err = pcall(ngx.socket.tcp) ngx.header["X-Err"] = tostring(ok) .. " " .. tostring(err)"#,
        )],
    },
    // Cosockets in rewrite_by_lua and access_by_lua (lua-resty-redis looking a key up
    // before the content, as an authorization check would).
    Case {
        name: "rewrite_and_access_use_cosockets",
        prelude: "",
        script: r#"ngx.say(ngx.var.http_x_echoed, " ", ngx.var.http_x_from_redis)"#,
        phases: &[
            (
                "rewrite",
                r#"local sock = ngx.socket.tcp()
sock:connect("127.0.0.1", tonumber(ngx.var.arg_peer))
sock:send("echo\nfrom rewrite\n")
ngx.req.set_header("X-Echoed", (sock:receive()))
sock:close()"#,
            ),
            (
                "access",
                r#"local red = require("nginx.redis"):new()
red:connect("127.0.0.1", tonumber(ngx.var.arg_redis))
red:set("token", "granted")
ngx.req.set_header("X-From-Redis", red:get("token"))
red:set_keepalive()"#,
            ),
        ],
    },
    // lua-resty-redis's README synopsis: set, get ("ngx.null ... if the key is not found"),
    // incr.
    redis(
        "redis_set_get_incr",
        r#"show(red:set("dog", "an animal")) show(red:get("dog")) show(red:get("cat"))
show(red:incr("n")) show(red:incr("n")) show(red:del("n")) show(red:mget("dog", "cat"))"#,
    ),
    // "init_pipeline ... commit_pipeline returns all the replies in a table".
    redis(
        "redis_pipeline",
        r#"red:init_pipeline()
red:set("cat", "Marry") red:set("horse", "Bob") red:get("cat") red:get("horse") red:lpush("cat", 1)
show(red:commit_pipeline())
show(red:commit_pipeline())"#,
    ),
    // "a false value and a string describing the error" for an error reply.
    redis(
        "redis_error_reply",
        r#"red:set("s", "x") show(red:lpush("s", 1)) show(red:no_such_command("x")) show(red:get("s"))"#,
    ),
    // Hashes and arrays: hmset with a table, hgetall's multi-bulk reply, array_to_hash.
    redis(
        "redis_hashes",
        r#"show(red:hmset("h", { a = "1" })) show(red:hget("h", "a")) show(red:hgetall("h"))
show(red:lrange("nothing", 0, -1))"#,
    ),
    // lua-resty-redis closes the connection on "timeout" (a BLPOP longer than the
    // client's timeout).
    redis(
        "redis_timeout",
        r#"red:set_timeout(150) show(red:blpop("empty", 1)) show(red:get("x"))"#,
    ),
    // set_keepalive, then a new client on the same pool: get_reused_times counts.
    redis(
        "redis_keepalive",
        r#"show(red:get_reused_times()) show(red:set_keepalive(10000, 10)) show(red:get("x"))
local again = redis:new() again:connect("127.0.0.1", tonumber(ngx.var.arg_redis))
show(again:get_reused_times() > 0) show(again:incr("k")) again:set_keepalive(10000, 10)"#,
    ),
    // tcpsock:connect("unix:/path/to/unix-domain.socket", options_table?), pooled by path.
    plain(
        "redis_unix_socket",
        r#"local redis = require "nginx.redis"
local red = redis:new()
local ok, err = red:connect("unix:" .. ngx.var.arg_unix)
ngx.say(ok, " ", err, " ", red:incr("u"), " ", red:get_reused_times(), " ", red:set_keepalive())
local again = redis:new()
again:connect("unix:" .. ngx.var.arg_unix)
ngx.say(again:get_reused_times(), " ", again:incr("u"))
ngx.say(redis:new():connect("unix:" .. ngx.var.arg_unix .. ".missing"))"#,
    ),
    redis(
        "redis_connect_refused",
        r#"local other = redis:new()
show(other:connect("127.0.0.1", tonumber(ngx.var.arg_dead))) show(other:get("x"))"#,
    ),
    // ngx.timer.at: "the callback ... will be called with the premature argument first,
    // then the extra arguments"; it runs later, outside the request.
    plain(
        "timer_at",
        r#"local ok, err = ngx.timer.at(0.05, function(premature, a, b)
  ngx.shared.t:set("at", tostring(premature) .. " " .. a .. " " .. b)
end, "x", 1)
ngx.say(ok, " ", err, " ", ngx.shared.t:get("at")) ngx.sleep(1) ngx.say(ngx.shared.t:get("at"))"#,
    ),
    // "ngx.timer.running_count: the number of timers currently running",
    // "ngx.timer.pending_count: the number of pending timers".
    plain(
        "timer_counts",
        r#"ngx.timer.at(0, function() ngx.sleep(2) end) ngx.timer.at(30, function() end)
ngx.sleep(0.2) ngx.say(ngx.timer.pending_count(), " ", ngx.timer.running_count())"#,
    ),
    // A timer's function may use cosockets and ngx.sleep (its context includes ngx.timer.*):
    // lua-resty-redis from a timer.
    plain(
        "timer_uses_cosockets",
        r#"ngx.timer.at(0, function(premature, port)
  local red = require("nginx.redis"):new()
  red:set_timeout(2000)
  local ok, err = red:connect("127.0.0.1", port)
  ngx.sleep(0.01)
  ngx.shared.t:set("redis", tostring(ok) .. " " .. tostring(err) .. " " .. tostring(red:incr("from_timer")))
  red:set_keepalive()
end, tonumber(ngx.var.arg_redis))
ngx.sleep(1) ngx.say(ngx.shared.t:get("redis"))"#,
    ),
    // ngx.timer.every: "runs the callback periodically"; an error in it is logged.
    plain(
        "timer_every",
        r#"ngx.timer.every(0.05, function() ngx.shared.t:incr("every", 1, 0) end)
ngx.timer.at(0, function() error("from a timer") end)
ngx.sleep(0.6) ngx.say(ngx.shared.t:get("every") >= 3)"#,
    ),
    // lua_max_running_timers (256 by default): a timer due while that many run is not run.
    plain(
        "timer_running_limit",
        r#"for _ = 1, 300 do ngx.timer.at(0, function() ngx.sleep(2) end) end
ngx.sleep(0.2) ngx.say(ngx.timer.running_count(), " ", ngx.timer.pending_count())"#,
    ),
];

/// A TCP server that acts on each connection's first line: `lines` writes lines with CRs and
/// closes; `short` writes a few bytes and closes; `hang` writes `partial` and stays silent
/// for 3 s; `parts` writes data around `--b--` boundaries and closes; `echo` echoes lines;
/// `slow` writes three lines in pieces 200 ms apart, then stays silent for 2 s; `drain`
/// waits 300 ms, then reads lines up to `end` and answers how many bytes came before it.
fn peer_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    return;
                }
                let _ = match first.trim_end() {
                    "lines" => stream.write_all(b"abcdefgh\r\nsecond line\nthi\rrd\r\nxyz tail"),
                    "short" => stream.write_all(b"a few bytes"),
                    "whoami" => match stream.peer_addr() {
                        Ok(from) => stream.write_all(format!("{}\n", from.ip()).as_bytes()),
                        Err(e) => Err(e),
                    },
                    "hang" => {
                        let _ = stream.write_all(b"partial");
                        std::thread::sleep(Duration::from_secs(3));
                        stream.write_all(b" and the rest\n")
                    }
                    "parts" => stream.write_all(b"hello, world--b--second part--b----b--tail"),
                    "slow" => {
                        for piece in [&b"first li"[..], b"ne\nsecond\nthi", b"rd\n"] {
                            let _ = stream.write_all(piece);
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        std::thread::sleep(Duration::from_secs(2));
                        Ok(())
                    }
                    "drain" => {
                        std::thread::sleep(Duration::from_millis(300));
                        let (mut line, mut count) = (Vec::new(), 0);
                        while reader.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                            if line == b"end\n" {
                                break;
                            }
                            count += line.len();
                            line.clear();
                        }
                        stream.write_all(format!("got {count}\n").as_bytes())
                    }
                    "echo" => {
                        let mut line = String::new();
                        while reader.read_line(&mut line).unwrap_or(0) > 0 {
                            if stream.write_all(line.as_bytes()).is_err() {
                                break;
                            }
                            line.clear();
                        }
                        Ok(())
                    }
                    _ => Ok(()),
                };
            });
        }
    });
    port
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    free_port()
}

/// Writes every case's script (and its phases') in a fresh folder.
fn write_scripts() -> std::path::PathBuf {
    let dir = temp_dir("lua-cosocket-scripts");
    for c in CASES {
        let script = format!("{}\n{}\n", c.prelude, c.script);
        std::fs::write(dir.join(format!("{}.lua", c.name)), script).unwrap();
        for (phase, script) in c.phases {
            std::fs::write(dir.join(format!("{}.{phase}.lua", c.name)), script).unwrap();
        }
    }
    dir
}

/// The `lua:` keys of every weir here: Debian's Lua modules, a shared dictionary.
const LUA_KEYS: &str =
    "  package_path: \"/usr/share/lua/5.1/?.lua;;\"\n  shared_dicts: { t: 1MiB }\n";

/// Each case's name with the names of its phases.
fn case_names<'p>(phases: &'p [Vec<&'static str>]) -> Vec<(&'static str, &'p [&'static str])> {
    CASES
        .iter()
        .zip(phases)
        .map(|(c, phases)| (c.name, phases.as_slice()))
        .collect()
}

fn ask(addr: std::net::SocketAddr, name: &str, query: &str) -> Resp {
    get(addr, "localhost", &format!("/case/{name}?{query}"))
}

#[test]
fn cosockets_and_lua_resty_redis_answer_as_in_nginx() {
    let scripts = write_scripts();
    let phases: Vec<Vec<&str>> = CASES
        .iter()
        .map(|c| c.phases.iter().map(|(phase, _)| *phase).collect())
        .collect();
    let names = case_names(&phases);
    let nginx = NginxLua::start(
        &scripts,
        &names,
        "lua_package_path \"/usr/share/lua/5.1/?.lua;;\"; lua_shared_dict t 1m;",
    );
    let weir = Weir::start(&weir_lua_cases(&scripts, &names, 1, LUA_KEYS));
    // One Redis each: both servers start from an empty store.
    let unix = ["--unixsocket", "{dir}/redis.sock"];
    let (nginx_redis, weir_redis) = (Redis::start_with(&unix), Redis::start_with(&unix));
    let peer = peer_server();
    let dead = dead_port();
    let udp = udp_server();
    let dgram = temp_dir("lua-dgram").join("dgram.sock");
    let unix_datagrams = unix_datagram_server(&dgram);
    let mut differences = Vec::new();
    let mut answers = std::collections::HashMap::new();
    for c in CASES {
        let expected = ask(
            nginx.addr,
            c.name,
            &format!(
                "peer={peer}&dead={dead}&redis={}&unix={}/redis.sock&udp={udp}&dgram={}",
                nginx_redis.port,
                nginx_redis.dir.display(),
                dgram.display()
            ),
        );
        let got = ask(
            weir.addr(),
            c.name,
            &format!(
                "peer={peer}&dead={dead}&redis={}&unix={}/redis.sock&udp={udp}&dgram={}",
                weir_redis.port,
                weir_redis.dir.display(),
                dgram.display()
            ),
        );
        let answer =
            |r: &Resp| format!("{} X-Err: {:?}\n{}", r.status, r.header("X-Err"), r.text());
        let (expected, got) = (answer(&expected), answer(&got));
        answers.insert(c.name, got.clone());
        if expected != got {
            differences.push(format!("{}:\nnginx: {expected:?}\nweir:  {got:?}", c.name));
        }
    }
    // The timer's error is logged with its line and traceback, and the worker serves on.
    weir.wait_for_line("256 lua_max_running_timers are not enough", 1);
    let line = weir.wait_for_line("from a timer", 1);
    assert!(
        line.contains("ERROR") && line.contains("ngx.timer"),
        "{line}"
    );
    assert_same_answers(&differences, CASES.len(), &nginx.error_log());
    // What the cases are about shows in weir's answers (not both servers failing alike).
    for (name, part) in [
        (
            "redis_set_get_incr",
            "OK\nan animal\nnull\n1\n2\n1\n[an animal userdata: NULL]",
        ),
        ("redis_pipeline", "[OK OK Marry Bob {false,WRONGTYPE"),
        ("tcp_bind", "127.0.0.3: true nil | 1 nil 127.0.0.3\n"),
        ("redis_keepalive", "0\n1\nnil closed\ntrue\n1\n"),
        ("redis_timeout", "nil timeout\nnil closed"),
        ("redis_connect_refused", "nil connection refused"),
        ("redis_unix_socket", "1 nil 1 0 1\n1 2\nnil"),
        ("rewrite_and_access_use_cosockets", "from rewrite granted\n"),
        (
            "receiveany",
            "hello\n, world--b--second part--b----b--tail\nnilclosed\n",
        ),
        ("timer_at", "1 nil nil\nfalse x 1\n"),
        ("timer_counts", "1 1\n"),
        ("timer_uses_cosockets", "1 nil 1\n"),
        ("timer_every", "true\n"),
        ("timer_running_limit", "256 "),
        ("receive_timeout_keeps_the_connection", "niltimeoutpartial"),
        (
            "receive_across_waits",
            "first line\nsecond\nthird\ntrue\nniltimeout\ntrue\n",
        ),
        ("receiveuntil_across_waits", "first \nond\nthird\n"),
        ("send_waits_for_a_slow_reader", "8388619\ngot 8388609\n"),
        ("setkeepalive_and_reuse", "0 1 nil\n1\nstill echo\n0\n"),
        (
            "receive_inside_coroutines",
            "[abcdefgh]\n[second line]\n[third]\ntrue2\ntrue10\n",
        ),
        (
            "header_filter_refuses_cosockets",
            "API disabled in the context of header_filter_by_lua*",
        ),
        (
            "udp_send_and_receive",
            "1\necho hello\n1\necho nested1 2.5\n1\nnilclosed\nnilclosed\nnilclosed\n",
        ),
        (
            "udp_receive_size",
            "echo big x\n10000\n10000\nfirst\nsecond\n",
        ),
        ("udp_timeout", "niltimeout\necho after\n"),
        ("udp_refused", "1\n1\nnilconnection refused\n"),
        ("udp_in_a_timer", "echo from a timer\n"),
        (
            "header_filter_refuses_udp",
            "API disabled in the context of header_filter_by_lua*",
        ),
    ] {
        assert!(answers[name].contains(part), "{name}: {answers:#?}");
    }
    // Both servers' unix datagrams arrived.
    let got = unix_datagrams.lock().unwrap().clone();
    assert_eq!(got, ["unix datagram", "unix datagram"]);
}

/// A UDP server answering each datagram: `echo ...` with itself, `big` with 10,000 bytes
/// (`echo big ` first), `twice` with two datagrams, `silent` with nothing.
fn udp_server() -> u16 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let datagram = &buf[..n];
            let _ = match datagram {
                b"big" => {
                    let mut big = b"echo big ".to_vec();
                    big.resize(10_000, b'x');
                    socket.send_to(&big, from)
                }
                b"twice" => socket
                    .send_to(b"first", from)
                    .and_then(|_| socket.send_to(b"second", from)),
                b"silent" => Ok(0),
                _ => socket.send_to(datagram, from),
            };
        }
    });
    port
}

/// A unix datagram socket at `path`: what it receives, in order.
fn unix_datagram_server(path: &std::path::Path) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let socket = std::os::unix::net::UnixDatagram::bind(path).unwrap();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            sink.lock().unwrap().push(text);
        }
    });
    got
}

/// weir with `script` at `/` (one worker) and a script answering at once at `/fast`.
fn one_script(script: &str) -> String {
    let fast = "  fast:\n    rule: \"Path(`/fast`)\"\n    priority: 100\n    \
                lua: { content: \"ngx.say('fast')\" }\n";
    weir_one_script(1, LUA_KEYS, fast, script)
}

/// lua-resty-redis's keep-alive across requests: the second request's client gets the
/// connection the first put back (`get_reused_times` > 0), and Redis sees one connection.
#[test]
fn a_kept_alive_connection_serves_the_next_requests() {
    let redis = Redis::start();
    let weir = Weir::start(&one_script(
        "local red = require('nginx.redis'):new()\n\
         local ok, err = red:connect('127.0.0.1', tonumber(ngx.var.arg_redis))\n\
         if not ok then ngx.say(err) return end\n\
         ngx.say(red:get_reused_times(), ' ', red:incr('hits'))\n\
         red:set_keepalive(10000, 10)",
    ));
    let path = format!("/?redis={}", redis.port);
    for (i, expected) in ["0 1\n", "1 2\n", "2 3\n"].iter().enumerate() {
        let resp = get(weir.addr(), "localhost", &path);
        assert_eq!(resp.text(), *expected, "request {i}");
    }
    let clients = redis_cli(redis.port, &["client", "list"]);
    let from_weir = clients
        .lines()
        .filter(|l| !l.contains("cmd=client"))
        .count();
    assert_eq!(from_weir, 1, "{clients}");
}

/// A socket object is weir's own userdata (`lua/cosocket/raw_tcp.rs`): one the script drops
/// without `close` or `setkeepalive` is closed once the collector finds it (Redis sees its
/// connection end), its methods refuse anything but a socket as `self`, and its metatable
/// (with the `__gc` that drops it) is hidden from scripts.
#[test]
fn a_dropped_socket_is_closed_when_collected() {
    let redis = Redis::start();
    let weir = Weir::start(&one_script(
        "local sock = ngx.socket.tcp()\n\
         assert(sock:connect('127.0.0.1', tonumber(ngx.var.arg_redis)))\n\
         sock:send('PING\\r\\n')\nngx.say(sock:receive())\n\
         local ok, err = pcall(sock.send, {}, 'PING\\r\\n')\n\
         ngx.say(ok, ' ', err, ' ', tostring(getmetatable(sock)))\n\
         sock = nil\ncollectgarbage()\ncollectgarbage()",
    ));
    let resp = get(weir.addr(), "localhost", &format!("/?redis={}", redis.port));
    assert_eq!(
        resp.text(),
        "+PONG\nfalse bad argument #1 (a cosocket expected) false\n"
    );
    // Redis notes a closed connection on its next event loop turn: give it a moment.
    let mut clients = String::new();
    for _ in 0..50 {
        clients = redis_cli(redis.port, &["client", "list"]);
        if clients.lines().all(|l| l.contains("cmd=client")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the dropped socket's connection is still open: {clients}");
}

/// A cosocket's wait yields the script's coroutine: while one request waits for a silent
/// peer, the one worker answers another at once; the waiting one then ends by its timeout.
#[test]
fn a_cosocket_wait_leaves_the_worker_to_other_requests() {
    let peer = peer_server();
    let weir = Weir::start(&one_script(
        "local sock = ngx.socket.tcp()\nsock:settimeout(2000)\n\
         assert(sock:connect('127.0.0.1', tonumber(ngx.var.arg_peer)))\n\
         sock:send('hang\\n')\nlocal data, err, partial = sock:receive('*a')\n\
         ngx.say(tostring(data), ' ', err, ' ', partial)",
    ));
    // The peer stays silent for 3 s; weir gives up after its 2 s timeout.
    assert_wait_leaves_the_worker_free(&weir, format!("/?peer={peer}"), "nil timeout partial\n");
}

/// While a request to `slow_path` waits (for 2 s, its timeout), the one worker answers `/fast`
/// at once; the waiting one then answers `slow_answer`. The fast answer comes well before the
/// slow one (a loaded machine may add seconds to both, not reorder them).
fn assert_wait_leaves_the_worker_free(weir: &Weir, slow_path: String, slow_answer: &str) {
    let addr = weir.addr();
    let started = std::time::Instant::now();
    let slow = std::thread::spawn(move || get(addr, "localhost", &slow_path));
    std::thread::sleep(Duration::from_millis(300));
    let fast = get(addr, "localhost", "/fast");
    assert_eq!(fast.text(), "fast\n");
    let fast_at = started.elapsed();
    let slow = slow.join().unwrap();
    assert_eq!(slow.text(), slow_answer);
    assert!(
        fast_at + Duration::from_secs(1) < started.elapsed(),
        "{fast_at:?}"
    );
}

/// A UDP cosocket's wait yields too: while one request waits for a datagram that never comes
/// (its peer named `localhost`, resolved as `connect` resolves it), the one worker answers
/// another at once; the waiting one then ends by its timeout.
#[test]
fn a_udp_wait_leaves_the_worker_to_other_requests() {
    let udp = udp_server();
    let weir = Weir::start(&one_script(
        "local sock = ngx.socket.udp()\nsock:settimeout(2000)\n\
         ngx.say(sock:setpeername('localhost', tonumber(ngx.var.arg_udp)))\n\
         sock:send('echo resolved') ngx.say(sock:receive())\n\
         sock:send('silent') ngx.say(sock:receive())",
    ));
    assert_wait_leaves_the_worker_free(
        &weir,
        format!("/?udp={udp}"),
        "1\necho resolved\nniltimeout\n",
    );
}

/// tcpsock:sslhandshake(reused_session, server_name, ssl_verify) over rustls: the server
/// sees `server_name` as SNI; with `ssl_verify` the certificate must chain to a trusted root
/// (here the test's own, through `SSL_CERT_FILE`, which the system's roots are read from) and
/// name `server_name`; without, anything goes.
#[test]
fn sslhandshake_sends_sni_and_verifies_when_asked() {
    let dir = temp_dir("lua-tls");
    let cert = make_cert(&dir, "server", &["localhost"], false);
    let nginx = Nginx::start_tls_location(
        &cert.cert,
        &cert.key,
        "return 200 \"sni=$ssl_server_name\\n\";",
    );
    let trust = format!("SSL_CERT_FILE={}", cert.cert.display());
    let weir = Weir::start_under(
        &["env", &trust],
        &one_script(
            "local sock = ngx.socket.tcp()\nsock:settimeout(5000)\n\
             assert(sock:connect('127.0.0.1', tonumber(ngx.var.arg_port)))\n\
             local session, err = sock:sslhandshake(nil, ngx.var.arg_name, ngx.var.arg_verify == '1')\n\
             if not session then ngx.say('failed: ', err) return end\n\
             sock:send({'GET / HTTP/1.0\\r\\n', 'Host: localhost\\r\\n\\r\\n'})\n\
             local answer = sock:receive('*a')\n\
             ngx.say(answer:match('sni=[^\\n]*'))",
        ),
        &[],
    );
    let port = nginx.addr.port();
    let ask = |name: &str, verify: u8| {
        get(
            weir.addr(),
            "localhost",
            &format!("/?port={port}&name={name}&verify={verify}"),
        )
        .text()
    };
    assert_eq!(ask("localhost", 0), "sni=localhost\n");
    assert_eq!(ask("localhost", 1), "sni=localhost\n");
    assert_eq!(ask("other.example", 0), "sni=other.example\n");
    let refused = ask("other.example", 1);
    assert!(
        refused.starts_with("failed: handshake failed: invalid peer certificate"),
        "{refused}"
    );
}

/// `init_worker_by_lua` may start timers ("a timer ... created in init_worker_by_lua") but
/// not use cosockets itself; the timer may, once the worker serves.
#[test]
fn init_worker_starts_a_timer_that_uses_cosockets() {
    let redis = Redis::start();
    let init_worker = format!(
        "  init_worker: |\n    \
         local ok, err = pcall(ngx.socket.tcp)\n    refused = err\n    \
         ngx.timer.at(0, function()\n      local red = require('nginx.redis'):new()\n      \
         red:connect('127.0.0.1', {})\n      \
         ngx.shared.t:set('from_timer', red:incr('started'))\n    end)\n",
        redis.port
    );
    let yaml = weir_one_script(
        1,
        &format!("{LUA_KEYS}{init_worker}"),
        "",
        "ngx.say(refused, ' ', ngx.shared.t:get('from_timer'))",
    );
    let weir = Weir::start(&yaml);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = get(weir.addr(), "localhost", "/").text();
        if text.ends_with(" 1\n") || std::time::Instant::now() > deadline {
            assert_eq!(
                text,
                "API disabled in the context of init_worker_by_lua* 1\n"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// On a stop, the timers still waiting run at once with `premature` true, as nginx's do on a
/// graceful exit (an `every` one for the last time); no timer can be started any more (`nil,
/// "process exiting"`), and the stop waits for their runs (one sleeps first).
#[test]
fn a_stop_runs_waiting_timers_early_with_premature_true() {
    let init_worker = "  init_worker: |\n    \
        ngx.timer.at(3600, function(premature, tag)\n      \
          ngx.sleep(0.3)\n      \
          local ok, err = ngx.timer.at(0, function() end)\n      \
          ngx.log(ngx.ERR, 'at ran: ', tostring(premature), ' ', tag, ' ', ngx.get_phase(), ' ', \
          tostring(ngx.worker.exiting()), ' ', tostring(ok), ' ', err, ' done')\n    \
        end, 'x')\n    \
        ngx.timer.every(3600, function(premature)\n      \
          ngx.log(ngx.ERR, 'every ran: ', tostring(premature), ' done')\n    \
        end)\n";
    let yaml = weir_one_script(
        1,
        &format!("{LUA_KEYS}{init_worker}"),
        "",
        "ngx.say(ngx.timer.pending_count(), ' ', tostring(ngx.worker.exiting()))",
    );
    let weir = Weir::start(&yaml);
    // The worker made its VM, and started the timers, as it started.
    assert_eq!(get(weir.addr(), "localhost", "/").text(), "2 false\n");
    weir.signal("TERM");
    let at = weir.wait_for_line("at ran: ", 1);
    assert!(
        at.contains("at ran: true x timer true nil process exiting done"),
        "{at}"
    );
    let every = weir.wait_for_line("every ran: ", 1);
    assert!(every.contains("every ran: true done"), "{every}");
    weir.wait_for_line("stopped", 1);
    let lines = weir.stderr();
    let at_line = lines.iter().position(|l| l.contains("at ran: "));
    let stopped = lines.iter().position(|l| l.ends_with("stopped"));
    assert!(at_line < stopped, "the stop waited for the run: {lines:#?}");
}

/// On a reload, the replaced VM's timers still waiting run at once with `premature` true and
/// `ngx.worker.exiting()` true, as nginx's do when a reload (HUP) ends its old workers
/// (lua-nginx-module's `ngx.timer.at`: premature is true "when the Nginx worker process is
/// trying to shut down, as in an Nginx configuration reload triggered by the HUP signal"); the
/// new VM's `init_worker` timers start as the reload is applied, without a request, as a new
/// nginx worker's do.
#[test]
fn a_reload_runs_the_replaced_vms_waiting_timers_early() {
    let init_worker = "  init_worker: |\n    \
        local generation = 'first'\n    \
        ngx.timer.at(0, function() ngx.log(ngx.ERR, 'started: ', generation, ' done') end)\n    \
        ngx.timer.every(3600, function(premature)\n      \
          ngx.log(ngx.ERR, 'every ran: ', tostring(premature), ' ', generation, ' ', \
          tostring(ngx.worker.exiting()), ' done')\n    \
        end)\n";
    let yaml = weir_one_script(
        1,
        &format!("{LUA_KEYS}{init_worker}"),
        "",
        "ngx.say(ngx.timer.pending_count(), ' ', tostring(ngx.worker.exiting()))",
    );
    let weir = Weir::start(&yaml);
    weir.wait_for_line("started: first done", 1);
    std::fs::write(weir.config_path(), yaml.replace("'first'", "'second'")).unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    let every = weir.wait_for_line("every ran: ", 1);
    assert!(every.contains("every ran: true first true done"), "{every}");
    weir.wait_for_line("started: second done", 1);
    // Only the new VM's `every` waits now, and its worker is not exiting.
    assert_eq!(get(weir.addr(), "localhost", "/").text(), "1 false\n");
    assert!(
        !weir
            .stderr()
            .iter()
            .any(|l| l.contains("every ran: true second")),
        "the new VM's timer ran early: {:#?}",
        weir.stderr()
    );
}

/// setkeepalive's idle timeout: a pooled connection nobody takes is closed once it passes,
/// without another request using the pool (Redis sees it go).
#[test]
fn an_idle_pooled_connection_is_closed_after_its_timeout() {
    let redis = Redis::start();
    let weir = Weir::start(&one_script(
        "local red = require('nginx.redis'):new()\n\
         assert(red:connect('127.0.0.1', tonumber(ngx.var.arg_redis)))\n\
         ngx.say(red:ping())\nred:set_keepalive(300, 10)",
    ));
    let resp = get(weir.addr(), "localhost", &format!("/?redis={}", redis.port));
    assert_eq!(resp.text(), "PONG\n");
    let from_weir = || {
        redis_cli(redis.port, &["client", "list"])
            .lines()
            .filter(|l| !l.contains("cmd=client"))
            .count()
    };
    assert_eq!(from_weir(), 1, "pooled");
    // 300 ms of idle timeout, then a sweep within a second (a loaded machine may be slower).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while from_weir() > 0 {
        assert!(std::time::Instant::now() < deadline, "still open");
        std::thread::sleep(Duration::from_millis(100));
    }
}
