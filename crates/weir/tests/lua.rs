//! The `lua` action (docs/lua.md): the same scripts run by Debian's nginx with
//! lua-nginx-module 0.10 (`libnginx-mod-http-lua`) and by weir, status, the headers the script
//! sets and the body compared case by case; then what only weir is asked: a runaway script
//! stopped, a failing one logged while the worker serves on, a shared dictionary counting
//! across workers, a reload taking a changed script, `weir check`'s errors.
//!
//! Each case names the section of lua-nginx-module's README (github.com/openresty/
//! lua-nginx-module, "Nginx API for Lua") whose behaviour it checks.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// What of the two answers must agree.
#[derive(Clone, Copy)]
enum Check {
    /// Status, `Content-Type` and body.
    Body,
    /// Status, the named headers (all their values), and body.
    Headers(&'static [&'static str]),
    /// Status and the named headers only: the body is the server's own page (nginx's HTML
    /// for `ngx.exit(404)`, weir's text).
    StatusHeaders(&'static [&'static str]),
}

/// One case: its name (the path `/case/NAME`), the request's query, extra header lines and
/// body (a body makes it a POST), the script, and what must agree.
struct Case {
    name: &'static str,
    query: &'static str,
    headers: &'static str,
    body: &'static str,
    script: &'static str,
    check: Check,
    /// Scripts of the phases before the content (`rewrite`, `access`) and after it
    /// (`header_filter`): a `lua` middleware in weir, `*_by_lua_file` in nginx.
    phases: &'static [(&'static str, &'static str)],
}

const fn case(name: &'static str, script: &'static str) -> Case {
    Case {
        name,
        query: "",
        headers: "",
        body: "",
        script,
        check: Check::Body,
        phases: &[],
    }
}

impl Case {
    const fn query(mut self, query: &'static str) -> Case {
        self.query = query;
        self
    }
    const fn headers(mut self, headers: &'static str) -> Case {
        self.headers = headers;
        self
    }
    const fn body(mut self, body: &'static str) -> Case {
        self.body = body;
        self
    }
    const fn check(mut self, check: Check) -> Case {
        self.check = check;
        self
    }
    const fn phases(mut self, phases: &'static [(&'static str, &'static str)]) -> Case {
        self.phases = phases;
        self
    }
    fn phase_names(&self) -> Vec<&'static str> {
        self.phases.iter().map(|(phase, _)| *phase).collect()
    }
}

/// Prints a table's keys in order with their values (lists joined by `,`): an answer both
/// servers give in the same order whatever their hash order.
const DUMP: &str = r#"
local function dump(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = t[k]
    if v == nil then v = t[tonumber(k)] end
    if type(v) == "table" then v = table.concat(v, ",") end
    ngx.say(k, "=", tostring(v))
  end
end
"#;

const CASES: &[Case] = &[
    // ngx.say / ngx.print: "Lua nil arguments are accepted and result in literal "nil"
    // strings while Lua booleans result in literal "true" or "false" strings. And the
    // ngx.null constant will yield the "null" string output." Tables are arrays of these.
    case("say_string", r#"ngx.say("hello, world")"#),
    case("print_no_newline", r#"ngx.print("a", "b") ngx.print("c")"#),
    case("say_numbers", r#"ngx.say(1, " ", 2.5, " ", -3, " ", 1/3, " ", 1e20, " ", 2^53)"#),
    case("say_nested_table", r#"ngx.say({"a", {"b", {"c", 1}}, "d"})"#),
    case("say_nil_bool_null", r#"ngx.say(nil, " ", true, " ", false, " ", ngx.null)"#),
    case("say_many_calls", r#"ngx.say("a") ngx.say() ngx.print("b") ngx.say("c")"#),
    case("say_returns_one", r#"local ok = ngx.say("x") ngx.say(ok)"#),
    // ngx.status: "Read and write the current request's response status."
    case("status_set", r#"ngx.status = 201 ngx.say("created")"#),
    case("status_read_back", r#"ngx.status = 202 ngx.say(ngx.status)"#),
    case("status_after_output", r#"ngx.say("a") ngx.status = 404 ngx.say("b")"#),
    // ngx.exit: "When status >= 200 ... it will interrupt the execution of the current request
    // and return status code to nginx"; ngx.OK quits the current phase.
    case("exit_404", r#"ngx.exit(404) ngx.say("not here")"#).check(Check::StatusHeaders(&[])),
    case("exit_500_constant", r#"ngx.exit(ngx.HTTP_INTERNAL_SERVER_ERROR)"#)
        .check(Check::StatusHeaders(&[])),
    case("exit_ok_after_output", r#"ngx.say("x") ngx.exit(ngx.OK) ngx.say("y")"#),
    case("exit_200_after_output", r#"ngx.say("a") ngx.exit(200) ngx.say("b")"#),
    case("exit_in_function", r#"local function f() ngx.say("in") ngx.exit(ngx.OK) end f() ngx.say("after")"#),
    case("eof_ends_output", r#"ngx.say("a") ngx.eof() ngx.say("b")"#),
    case("flush_returns", r#"ngx.say("a") ngx.say(ngx.flush())"#),
    // ngx.header.HEADER: "Underscores (_) in the header names will be replaced by hyphens (-)
    // by default"; "a Lua table ... for multi-value headers"; "Setting ngx.header.HEADER to
    // nil will remove it".
    case("header_set", r#"ngx.header["X-Test"] = "value" ngx.say("ok")"#)
        .check(Check::Headers(&["X-Test"])),
    case("header_underscore", r#"ngx.header.x_my_header = "u" ngx.say("ok")"#)
        .check(Check::Headers(&["X-My-Header"])),
    case("header_multi_value", r#"ngx.header["X-Multi"] = {"a", "b"} ngx.say("ok")"#)
        .check(Check::Headers(&["X-Multi"])),
    case("header_nil_clears", r#"ngx.header["X-A"] = "1" ngx.header["X-A"] = nil ngx.say(ngx.header["X-A"])"#)
        .check(Check::Headers(&["X-A"])),
    case("header_read_back", r#"ngx.header["X-B"] = "2" ngx.say(ngx.header.x_b, " ", ngx.header["x-b"])"#)
        .check(Check::Headers(&["X-B"])),
    case("header_number", r#"ngx.header["X-N"] = 42 ngx.say("ok")"#)
        .check(Check::Headers(&["X-N"])),
    case("header_multi_read", r#"ngx.header["X-L"] = {"1", "2"} local v = ngx.header["X-L"] ngx.say(type(v), " ", table.concat(v, ","))"#)
        .check(Check::Headers(&["X-L"])),
    case("content_type", r#"ngx.header.content_type = "application/json" ngx.say("{}")"#),
    case("header_after_output", r#"ngx.say("a") ngx.header["X-Late"] = "1" ngx.say("b")"#)
        .check(Check::Headers(&["X-Late"])),
    // ngx.redirect: "Issue an HTTP 301 or 302 redirection to uri", 302 by default.
    case("redirect_default", r#"ngx.redirect("/target")"#).check(Check::StatusHeaders(&["Location"])),
    case("redirect_301", r#"ngx.redirect("/moved?x=1", 301)"#).check(Check::StatusHeaders(&["Location"])),
    case("redirect_307_absolute", r#"ngx.redirect("http://example.com/x", ngx.HTTP_TEMPORARY_REDIRECT)"#)
        .check(Check::StatusHeaders(&["Location"])),
    case("redirect_bad_status", r#"ngx.redirect("/x", 200)"#).check(Check::StatusHeaders(&[])),
    // ngx.var.VARIABLE: nginx's variables.
    case("var_uri", r#"ngx.say(ngx.var.uri)"#).query("x=1"),
    case("var_request_uri", r#"ngx.say(ngx.var.request_uri)"#).query("a=1&b=%20"),
    case("var_args", r#"ngx.say(ngx.var.args, " ", ngx.var.is_args)"#).query("a=1&b=2"),
    case("var_args_none", r#"ngx.say(ngx.var.args, " [", ngx.var.is_args, "]")"#),
    case("var_arg", r#"ngx.say(ngx.var.arg_a, " ", ngx.var.arg_b, " ", ngx.var.arg_missing)"#)
        .query("a=1&b=x%20y"),
    case("var_http", r#"ngx.say(ngx.var.http_x_foo, " ", ngx.var.http_user_agent, " ", ngx.var.http_none)"#)
        .headers("X-Foo: bar\r\nUser-Agent: tester\r\n"),
    case("var_cookie", r#"ngx.say(ngx.var.cookie_b, " ", ngx.var.cookie_a, " ", ngx.var.cookie_none)"#)
        .headers("Cookie: a=1; b=two\r\n"),
    case("var_host", r#"ngx.say(ngx.var.host)"#),
    case("var_method", r#"ngx.say(ngx.var.request_method)"#),
    case("var_remote_addr", r#"ngx.say(ngx.var.remote_addr)"#),
    case("var_scheme", r#"ngx.say(ngx.var.scheme, " ", ngx.var.server_protocol)"#),
    case("var_user_writable", r#"ngx.var.myvar = "x" ngx.say(ngx.var.myvar)"#),
    case("var_unknown", r#"ngx.say(ngx.var.no_such_variable)"#),
    case("var_content_length", r#"ngx.say(ngx.var.content_length, " ", ngx.var.content_type)"#)
        .headers("Content-Type: text/x-test\r\n")
        .body("abc"),
    // ngx.req.*
    case("req_get_method", r#"ngx.say(ngx.req.get_method())"#).body("x"),
    case("req_set_method", r#"ngx.req.set_method(ngx.HTTP_PUT) ngx.say(ngx.req.get_method(), " ", ngx.var.request_method)"#),
    case("req_get_uri_args", "local t = ngx.req.get_uri_args() dump(t)").query("a=1&b=2&b=3&c&d="),
    case("req_uri_args_escaped", "dump(ngx.req.get_uri_args())").query("q=a%20b+c&k%3D=v"),
    case("req_set_uri_args_string", r#"ngx.req.set_uri_args("x=1&y=2") ngx.say(ngx.var.args, " ", ngx.var.arg_y)"#)
        .query("old=1"),
    case("req_set_uri_args_table", r#"ngx.req.set_uri_args({a = "b c"}) ngx.say(ngx.var.args)"#),
    case("req_set_uri", r#"ngx.req.set_uri("/new/path") ngx.say(ngx.var.uri)"#),
    case("req_get_headers", r#"local h = ngx.req.get_headers() ngx.say(h["x-one"], " ", h.x_one, " ", h["X-One"], " ", table.concat(h["x-multi"], ","))"#)
        .headers("X-One: 1\r\nX-Multi: a\r\nX-Multi: b\r\n"),
    case("req_set_header", r#"ngx.req.set_header("X-New", "v") ngx.say(ngx.var.http_x_new, " ", ngx.req.get_headers()["x-new"])"#),
    case("req_clear_header", r#"ngx.req.clear_header("X-Gone") ngx.say(ngx.var.http_x_gone, " ", ngx.req.get_headers()["x-gone"])"#)
        .headers("X-Gone: 1\r\n"),
    case("req_read_body", r#"ngx.req.read_body() ngx.say(ngx.req.get_body_data())"#).body("hello body"),
    case("req_body_unread", r#"ngx.say(ngx.req.get_body_data())"#).body("hello"),
    case("req_post_args", "ngx.req.read_body() dump(ngx.req.get_post_args())")
        .headers("Content-Type: application/x-www-form-urlencoded\r\n")
        .body("a=1&b=x+y&b=z"),
    case("req_http_version", r#"ngx.say(ngx.req.http_version())"#),
    case("req_start_time", r#"local t = ngx.req.start_time() ngx.say(type(t), " ", t <= ngx.now() + 0.001, " ", t > 1e9)"#),
    // ngx.ctx: "a Lua table ... for storing per-request Lua context data".
    case("ctx_table", r#"ngx.ctx.a = 1 local c = ngx.ctx c.b = 2 ngx.say(ngx.ctx.a, ngx.ctx.b, " ", type(ngx.ctx))"#),
    case("ctx_replace", r#"ngx.ctx = { x = "y" } ngx.say(ngx.ctx.x)"#),
    // Constants.
    case("constants", "ngx.say(ngx.OK, ngx.ERROR, ngx.AGAIN, ngx.DONE, ngx.DECLINED, ' ', ngx.HTTP_OK, ngx.HTTP_CREATED, ngx.HTTP_NOT_FOUND, ngx.HTTP_MOVED_TEMPORARILY, ngx.HTTP_INTERNAL_SERVER_ERROR, ngx.HTTP_SERVICE_UNAVAILABLE, ngx.HTTP_TOO_MANY_REQUESTS)"),
    case("method_constants", "ngx.say(ngx.HTTP_GET, ' ', ngx.HTTP_HEAD, ' ', ngx.HTTP_POST, ' ', ngx.HTTP_PUT, ' ', ngx.HTTP_DELETE, ' ', ngx.HTTP_OPTIONS, ' ', ngx.HTTP_PATCH, ' ', ngx.HTTP_TRACE)"),
    case("log_levels", "ngx.say(ngx.STDERR, ngx.EMERG, ngx.ALERT, ngx.CRIT, ngx.ERR, ngx.WARN, ngx.NOTICE, ngx.INFO, ngx.DEBUG)"),
    case("ngx_null", r#"ngx.say(ngx.null == nil, " ", type(ngx.null), " ", ngx.null == require("cjson").null)"#),
    case("log_and_print", r#"ngx.log(ngx.ERR, "an error ", 1, nil, true) print("noticed") ngx.say("logged")"#),
    // Time: ngx.time, now, today, http_time, cookie_time, parse_http_time, update_time.
    case("time_now", r#"ngx.update_time() ngx.say(math.abs(ngx.time() - os.time()) <= 1, " ", math.abs(ngx.now() - os.time()) <= 1.5, " ", ngx.time() == math.floor(ngx.time()))"#),
    case("http_time", r#"ngx.say(ngx.http_time(1290079655), "|", ngx.http_time(0))"#),
    case("cookie_time", r#"ngx.say(ngx.cookie_time(1290079655))"#),
    case("parse_http_time", r#"ngx.say(ngx.parse_http_time("Thu, 18 Nov 2010 11:27:35 GMT"), " ", ngx.parse_http_time("junk"))"#),
    case("today_format", r#"ngx.say(ngx.today() == os.date("%Y-%m-%d"), " ", ngx.localtime() == os.date("%Y-%m-%d %H:%M:%S") or ngx.localtime() > os.date("%Y-%m-%d %H:%M:%S"))"#),
    // Digests and encodings.
    case("md5", r#"ngx.say(ngx.md5("hello"), " ", ngx.md5(""), " ", #ngx.md5_bin("x"), " ", ngx.encode_base64(ngx.md5_bin("x")))"#),
    case("sha1_bin", r#"ngx.say(ngx.encode_base64(ngx.sha1_bin("hello")))"#),
    case("hmac_sha1", r#"ngx.say(ngx.encode_base64(ngx.hmac_sha1("key", "The quick brown fox")))"#),
    case("crc32", r#"ngx.say(ngx.crc32_short("hello"), " ", ngx.crc32_long("hello"), " ", ngx.crc32_long(""))"#),
    case("base64", r#"ngx.say(ngx.encode_base64("hello?"), " ", ngx.encode_base64("a", true), " ", ngx.decode_base64("aGVsbG8="), " ", ngx.decode_base64("!!"), " ", ngx.decode_base64("YQ"))"#),
    case("escape_uri", r#"ngx.say(ngx.escape_uri("a b/c?d=e&f~g_h.i-j*k"))"#),
    case("unescape_uri", r#"ngx.say(ngx.unescape_uri("a%20b+c%2F%zz"))"#),
    case("encode_args", r#"ngx.say(ngx.encode_args({a = "b c"}), " ", ngx.encode_args({k = {"1", "2"}}), " ", ngx.encode_args({flag = true}), "[", ngx.encode_args({off = false}), "]")"#),
    case("decode_args", r#"dump(ngx.decode_args("a=1&b=%20x&b=y&c"))"#),
    case("quote_sql_str", r#"ngx.say(ngx.quote_sql_str("it's \"x\"\n\\ \0 \26"))"#),
    // ngx.shared.DICT (lua_shared_dict d 1m).
    case("shdict_set_get", r#"local d = ngx.shared.d d:set("k", "v") d:set("n", 1.5) d:set("b", false) ngx.say(d:get("k"), " ", d:get("n"), " ", d:get("b"), " ", d:get("none"))"#),
    case("shdict_set_returns", r#"local d = ngx.shared.d ngx.say(d:set("r", 1)) ngx.say(d:safe_set("r2", 2))"#),
    case("shdict_incr", r#"local d = ngx.shared.d ngx.say(d:incr("cnt", 1, 0)) ngx.say(d:incr("cnt", 5)) ngx.say(d:incr("cnt_missing", 1))"#),
    case("shdict_incr_not_number", r#"local d = ngx.shared.d d:set("s", "str") ngx.say(d:incr("s", 1))"#),
    case("shdict_add", r#"local d = ngx.shared.d ngx.say(d:add("a", 1)) ngx.say(d:add("a", 2)) ngx.say(d:safe_add("a", 3)) ngx.say(d:get("a"))"#),
    case("shdict_replace", r#"local d = ngx.shared.d ngx.say(d:replace("nope", 1)) d:set("rp", 1) ngx.say(d:replace("rp", 2)) ngx.say(d:get("rp"))"#),
    case("shdict_delete", r#"local d = ngx.shared.d d:set("del", 1) d:delete("del") ngx.say(d:get("del"))"#),
    case("shdict_flags", r#"local d = ngx.shared.d d:set("f", "v", 0, 7) ngx.say(d:get("f")) d:set("g", "w") ngx.say(d:get("g"))"#),
    case("shdict_ttl_expire", r#"local d = ngx.shared.d d:set("t", 1, 100) local ttl = d:ttl("t") ngx.say(ttl > 99 and ttl <= 100) d:set("u", 1) ngx.say(d:ttl("u")) ngx.say(d:ttl("missing")) d:expire("u", 50) ngx.say(d:ttl("u") > 49)"#),
    case("shdict_list", r#"local d = ngx.shared.d ngx.say(d:lpush("l", "a")) ngx.say(d:rpush("l", "b")) d:lpush("l", 3) ngx.say(d:llen("l"), " ", d:lpop("l"), " ", d:rpop("l"), " ", d:llen("l"), " ", d:lpop("l"), " ", d:lpop("l"), " ", d:llen("l"))"#),
    case("shdict_list_type_errors", r#"local d = ngx.shared.d d:set("sv", 1) ngx.say(d:lpush("sv", "x")) d:rpush("lv", "x") ngx.say(d:get("lv"))"#),
    case("shdict_get_keys", r#"local d = ngx.shared.k d:set("only", 1) local keys = d:get_keys() ngx.say(#keys, " ", keys[1])"#),
    case("shdict_flush", r#"local d = ngx.shared.f d:set("a", 1) d:set("b", 2, 0.001) ngx.sleep(0.01) ngx.say(d:get("b"), " ", d:flush_expired()) d:flush_all() ngx.say(d:get("a"), " ", #d:get_keys())"#),
    case("shdict_get_stale", r#"local d = ngx.shared.d d:set("st", "old", 0.001) ngx.sleep(0.01) ngx.say(d:get("st"), " ", d:get_stale("st"))"#),
    case("shdict_capacity", r#"ngx.say(ngx.shared.d:capacity())"#),
    // cjson, as OpenResty bundles lua-cjson.
    case("cjson_array", r#"local cjson = require "cjson" ngx.say(cjson.encode({1, 2, "three", true}))"#),
    case("cjson_object", r#"local cjson = require "cjson" ngx.say(cjson.encode({path = "a/b"}))"#),
    case("cjson_empty_table", r#"local cjson = require "cjson" ngx.say(cjson.encode({}), cjson.encode({a = {}}))"#),
    case("cjson_holes", r#"local cjson = require "cjson" ngx.say(cjson.encode({[1] = 1, [3] = 3}))"#),
    case("cjson_sparse", r#"local cjson = require "cjson" ngx.say(pcall(cjson.encode, {[1000] = 1}))"#),
    case("cjson_null", r#"local cjson = require "cjson" ngx.say(cjson.encode({cjson.null, ngx.null}))"#),
    case("cjson_numbers", r#"local cjson = require "cjson" ngx.say(cjson.encode({0.1, 1/3, 1e20, -5, 2^53}))"#),
    case("cjson_escapes", r#"local cjson = require "cjson" ngx.say(cjson.encode("a\"b\\c\n\1\t/"))"#),
    case("cjson_decode", r#"local cjson = require "cjson" local t = cjson.decode('{"a":[1,2,{"b":null}],"s":"x\\u0041"}') ngx.say(t.a[1], " ", #t.a, " ", t.a[3].b == cjson.null, " ", t.s)"#),
    case("cjson_decode_error", r#"local cjson = require "cjson" ngx.say(pcall(cjson.decode, "{bad") == false)"#),
    case("cjson_safe", r#"local safe = require "cjson.safe" local v, err = safe.decode("{bad") ngx.say(v, " ", err ~= nil) ngx.say(safe.encode({1}))"#),
    case("cjson_unsupported", r#"local cjson = require "cjson.safe" local v, err = cjson.encode({f = print}) ngx.say(v, " ", err)"#),
    // ngx.re: PCRE's options and lua-nginx-module's captures.
    case("re_match", r#"local m = ngx.re.match("hello 1234", "([a-z]+) ([0-9]+)") ngx.say(m[0], "|", m[1], "|", m[2])"#),
    case("re_match_named", r#"local m = ngx.re.match("key=val", "(?<k>\\w+)=(?<v>\\w+)") ngx.say(m.k, " ", m.v, " ", m[1], " ", m[2])"#),
    case("re_no_match", r#"ngx.say(ngx.re.match("abc", "\\d"))"#),
    case("re_case_insensitive", r#"ngx.say(ngx.re.match("HELLO", "hello", "i")[0])"#),
    case("re_unmatched_group", r#"local m = ngx.re.match("ab", "(a)(x)?b") ngx.say(m[1], " ", m[2])"#),
    case("re_find", r#"ngx.say(ngx.re.find("hello world", "wor")) ngx.say(ngx.re.find("hello", "(l+)(o)", "jo", nil, 2)) ngx.say(ngx.re.find("abc", "x"))"#),
    case("re_gmatch", r#"for m in ngx.re.gmatch("a1b2c3", "[a-z](\\d)") do ngx.say(m[0], " ", m[1]) end"#),
    case("re_sub", r#"ngx.say(ngx.re.sub("hello world", "o", "0"))"#),
    case("re_gsub_template", r#"ngx.say(ngx.re.gsub("a=1, b=2", "(\\w)=(\\d)", "$2=$1 ${1}$$"))"#),
    case("re_gsub_function", r#"ngx.say(ngx.re.gsub("one two", "\\w+", function(m) return m[0]:upper() end))"#),
    case("re_gsub_empty_matches", r#"ngx.say(ngx.re.gsub("abc", "x*", "-"))"#),
    case("re_ctx_pos", r#"local ctx = {pos = 3} local m = ngx.re.match("a1b2", "\\d", "", ctx) ngx.say(m[0], " ", ctx.pos)"#),
    case("re_bad_pattern", r#"local m, err = ngx.re.match("x", "(") ngx.say(m, " ", err ~= nil)"#),
    case("re_options_s_x_m", r#"ngx.say(#ngx.re.match("a\nb", "a.b", "s")[0], " ", ngx.re.match("abc", "a b c", "x")[0], " ", ngx.re.match("x\nab", "^ab", "m")[0], " ", ngx.re.match("a\nb", "a.b"))"#),
    case("re_anchored", r#"ngx.say(ngx.re.match("xab", "ab", "a"), " ", ngx.re.match("abx", "ab", "a")[0])"#),
    // Non-blocking waits and errors.
    case("sleep", r#"ngx.sleep(0.01) ngx.say("slept") ngx.sleep(0) ngx.say("again")"#),
    case("runtime_error", r#"local t = nil ngx.say(t.x)"#).check(Check::StatusHeaders(&[])),
    case("error_call", r#"error("boom")"#).check(Check::StatusHeaders(&[])),
    case("pcall_error", r#"local ok, err = pcall(error, "inner") ngx.say(ok, " ", err)"#),
    case("lua_libraries", r#"ngx.say(string.format("%5.2f|%d|%s", 3.14159, 42, "s"), " ", table.concat({1, 2}, "+"), " ", math.floor(2.7), " ", type(os.time()), " ", type(jit), " ", type(ngx.req))"#),
    // The `lua` middleware's phases: rewrite_by_lua, access_by_lua ("ngx.exit with status
    // >= 200 ... terminates the request", ngx.OK goes on), header_filter_by_lua.
    case("access_deny", r#"ngx.say("in")"#)
        .phases(&[("access", r#"if not ngx.var.http_x_key then ngx.exit(403) end"#)])
        .check(Check::StatusHeaders(&[])),
    case("access_allow", r#"ngx.say("in")"#)
        .phases(&[("access", r#"if not ngx.var.http_x_key then ngx.exit(403) end"#)])
        .headers("X-Key: k\r\n"),
    case("access_exit_ok", r#"ngx.say("content ran")"#).phases(&[("access", "ngx.exit(ngx.OK)")]),
    case("access_answers", r#"ngx.say("content ran")"#)
        .phases(&[("access", r#"ngx.header["X-From"] = "access" ngx.say("from access") ngx.exit(200)"#)])
        .check(Check::Headers(&["X-From"])),
    case("access_redirect", r#"ngx.say("content ran")"#)
        .phases(&[("access", r#"ngx.redirect("/login")"#)])
        .check(Check::StatusHeaders(&["Location"])),
    case("access_error", r#"ngx.say("content ran")"#)
        .phases(&[("access", r#"error("denied by error")"#)])
        .check(Check::StatusHeaders(&[])),
    case("access_set_header", r#"ngx.say(ngx.var.http_x_added, " ", ngx.var.http_x_gone, " ", ngx.req.get_headers()["x-added"])"#)
        .phases(&[("access", r#"ngx.req.set_header("X-Added", "yes") ngx.req.clear_header("X-Gone")"#)])
        .headers("X-Gone: 1\r\n"),
    case("rewrite_uri_and_args", r#"ngx.say(ngx.var.uri, " ", ngx.var.args, " ", ngx.var.arg_b)"#)
        .phases(&[("rewrite", r#"ngx.req.set_uri_args("a=1&b=two") ngx.req.set_uri("/case/rewritten")"#)])
        .query("old=1"),
    case("rewrite_then_access", r#"ngx.say(ngx.var.http_x_r, " ", ngx.var.http_x_a)"#)
        .phases(&[
            ("rewrite", r#"ngx.req.set_header("X-R", "r") ngx.ctx.from_rewrite = "+ctx""#),
            ("access", r#"ngx.req.set_header("X-A", ngx.var.http_x_r .. "a" .. ngx.ctx.from_rewrite)"#),
        ]),
    case("header_filter_adds", r#"ngx.say("body")"#)
        .phases(&[("header_filter", r#"ngx.header["X-Filtered"] = "1""#)])
        .check(Check::Headers(&["X-Filtered"])),
    case("header_filter_removes", r#"ngx.header["X-Drop"] = "1" ngx.header["X-Keep"] = "k" ngx.say("body")"#)
        .phases(&[("header_filter", r#"ngx.header["X-Drop"] = nil"#)])
        .check(Check::Headers(&["X-Drop", "X-Keep"])),
    case("header_filter_reads_status", r#"ngx.status = 202 ngx.say("body")"#)
        .phases(&[("header_filter", r#"ngx.header["X-Status"] = ngx.status ngx.header["X-Type"] = ngx.header.content_type"#)])
        .check(Check::Headers(&["X-Status", "X-Type"])),
    case("header_filter_status", r#"ngx.say("body")"#)
        .phases(&[("header_filter", "ngx.status = 201")]),
    case("coroutines", r#"local co = coroutine.wrap(function() coroutine.yield(1) coroutine.yield(2) end) ngx.say(co(), co())"#),
];

/// Writes every case's script (after the shared helpers) as `NAME.lua` in a fresh folder.
fn write_scripts() -> std::path::PathBuf {
    let dir = temp_dir("lua-scripts");
    for c in CASES {
        std::fs::write(
            dir.join(format!("{}.lua", c.name)),
            format!("{DUMP}\n{}\n", c.script),
        )
        .unwrap();
        for (phase, script) in c.phases {
            std::fs::write(dir.join(format!("{}.{phase}.lua", c.name)), script).unwrap();
        }
    }
    dir
}

fn ask(addr: std::net::SocketAddr, c: &Case) -> Resp {
    let target = match c.query {
        "" => format!("/case/{}", c.name),
        query => format!("/case/{}?{query}", c.name),
    };
    let (method, body_head) = match c.body {
        "" => ("GET", String::new()),
        body => ("POST", format!("Content-Length: {}\r\n", body.len())),
    };
    request(
        addr,
        &format!(
            "{method} {target} HTTP/1.1\r\nHost: Example.COM:8080\r\n{}{body_head}Connection: close\r\n\r\n{}",
            c.headers, c.body
        ),
    )
}

/// Every value of the header `name`, in order, joined by `, `.
fn values(resp: &Resp, name: &str) -> Option<String> {
    let all: Vec<&str> = resp
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect();
    (!all.is_empty()).then(|| all.join(", "))
}

#[test]
fn the_same_scripts_answer_as_in_nginx_with_lua_nginx_module() {
    let scripts = write_scripts();
    let phases: Vec<Vec<&str>> = CASES.iter().map(Case::phase_names).collect();
    let names: Vec<(&str, &[&str])> = CASES
        .iter()
        .zip(&phases)
        .map(|(c, phases)| (c.name, phases.as_slice()))
        .collect();
    let nginx = NginxLua::start(
        &scripts,
        &names,
        "lua_shared_dict d 1m; lua_shared_dict k 64k; lua_shared_dict f 64k;",
    );
    let weir = Weir::start(&weir_lua_cases(
        &scripts,
        &names,
        1,
        "  shared_dicts: { d: 1MiB, k: 64KiB, f: 64KiB }\n",
    ));
    let mut differences = Vec::new();
    for c in CASES {
        let expected = ask(nginx.addr, c);
        let got = ask(weir.addr(), c);
        let mut differ = |what: &str, nginx: String, weir: String| {
            if nginx != weir {
                differences.push(format!(
                    "{}: {what}: nginx {nginx:?}, weir {weir:?}",
                    c.name
                ));
            }
        };
        differ(
            "status",
            expected.status.to_string(),
            got.status.to_string(),
        );
        let (headers, body): (&[&str], bool) = match c.check {
            Check::Body => (&["Content-Type"], true),
            Check::Headers(names) => (names, true),
            Check::StatusHeaders(names) => (names, false),
        };
        for name in headers {
            differ(
                &format!("header {name}"),
                format!("{:?}", values(&expected, name)),
                format!("{:?}", values(&got, name)),
            );
        }
        if body {
            differ("body", expected.text(), got.text());
        }
    }
    let log: Vec<char> = nginx.error_log().chars().collect();
    let tail: String = log[log.len().saturating_sub(4000)..].iter().collect();
    assert_same_answers(&differences, CASES.len(), &tail);
    assert!(CASES.len() >= 60);
}

/// A config with one `lua` route at `/` and more YAML after `lua:`'s keys.
fn one_script(script: &str, lua_extra: &str, workers: usize) -> String {
    weir_one_script(
        workers,
        &format!("  shared_dicts: {{ counters: 1MiB }}\n{lua_extra}"),
        "",
        script,
    )
}

#[test]
fn a_script_that_does_not_yield_is_stopped_and_the_worker_serves_on() {
    let weir = Weir::start(&one_script(
        "if ngx.var.arg_spin then while true do end end\n\
         if ngx.var.arg_sum then local n = 0 for i = 1, math.huge do n = n + i % 7 end end\n\
         ngx.say('fine, jit ', tostring(jit.status()))",
        "  max_run_time: 200ms\n",
        1,
    ));
    let started = Instant::now();
    let resp = get(weir.addr(), "localhost", "/?spin=1");
    assert_eq!(resp.status, 500);
    assert!(started.elapsed() < Duration::from_secs(10));
    let line = weir.wait_for_line("ran longer than lua.max_run_time", 1);
    assert!(
        line.contains("ERROR") && line.contains("router `script`"),
        "{line}"
    );
    // The one worker is free again, the JIT compiler on (the loops above ran compiled).
    assert_eq!(
        get(weir.addr(), "localhost", "/").text(),
        "fine, jit true\n"
    );
    let started = Instant::now();
    assert_eq!(get(weir.addr(), "localhost", "/?sum=1").status, 500);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(
        get(weir.addr(), "localhost", "/").text(),
        "fine, jit true\n"
    );
}

#[test]
fn a_runtime_error_is_a_500_and_a_log_line_with_the_script_line_and_traceback() {
    let weir = Weir::start(&one_script(
        "local function inner(t)\n  return t.field\nend\nif ngx.var.arg_fail then inner(nil) end\nngx.say('fine')",
        "",
        1,
    ));
    assert_eq!(get(weir.addr(), "localhost", "/?fail=1").status, 500);
    let line = weir.wait_for_line("attempt to index", 1);
    // The config's line of `return t.field` (the script starts on line 11 of weir.yaml).
    assert!(
        line.contains("weir.yaml:12: attempt to index local 't' (a nil value)"),
        "{line}"
    );
    let log = weir.stderr().join("\n");
    assert!(log.contains("stack traceback:"), "{log}");
    assert!(
        log.contains("in function 'inner'")
            || log.contains("in upvalue 'inner'")
            || log.contains("in local 'inner'"),
        "{log}"
    );
    let resp = get(weir.addr(), "localhost", "/");
    assert_eq!((resp.status, resp.text().as_str()), (200, "fine\n"));
}

#[test]
fn what_weir_lacks_is_an_error_naming_it() {
    let weir = Weir::start(&one_script(
        "local ok, err = pcall(ngx.location.capture, '/x')\nngx.say(ok, ' ', err)\nngx.socket.udp()",
        "",
        1,
    ));
    let resp = get(weir.addr(), "localhost", "/");
    assert_eq!(resp.status, 500);
    let line = weir.wait_for_line("ngx.socket.udp is not supported by weir", 1);
    assert!(line.contains("ERROR"), "{line}");
}

#[test]
fn a_shared_dict_counts_every_increment_from_two_workers() {
    let weir = Weir::start(&one_script(
        "local d = ngx.shared.counters\nif ngx.var.arg_read then ngx.say(d:get('hits')) return end\nlocal n, err = d:incr('hits', 1, 0)\nngx.say(n, err)",
        "",
        2,
    ));
    let addr = weir.addr();
    let (threads, each) = (8, 50);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                // A connection each: SO_REUSEPORT spreads them over both workers.
                let mut conn = Conn::open(addr);
                for _ in 0..each {
                    conn.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                    let resp = conn.read(false).expect("an answer");
                    assert_eq!(resp.status, 200, "{}", resp.text());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let total = get(addr, "localhost", "/?read=1").text();
    assert_eq!(total.trim(), (threads * each).to_string());
}

#[test]
fn ngx_sleep_yields_the_worker_to_other_requests() {
    let weir = Weir::start(&one_script(
        "if ngx.var.arg_slow then ngx.sleep(2) end\nngx.say('done')",
        "",
        1,
    ));
    let addr = weir.addr();
    let slow = std::thread::spawn(move || {
        let started = Instant::now();
        let resp = get(addr, "localhost", "/?slow=1");
        (resp.text(), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    assert_eq!(get(addr, "localhost", "/").text(), "done\n");
    // The one worker answered while the other request slept.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    let (text, took) = slow.join().unwrap();
    assert_eq!(text, "done\n");
    assert!(took >= Duration::from_millis(1950), "{took:?}");
}

#[test]
fn init_and_init_worker_run_before_the_scripts() {
    let weir = Weir::start(&one_script(
        "ngx.say(greeting, ' ', worker_ready, ' ', require('cjson').encode({1}))",
        "  init: \"greeting = 'hello'\"\n  init_worker: \"worker_ready = true\"\n",
        2,
    ));
    assert_eq!(
        get(weir.addr(), "localhost", "/").text(),
        "hello true [1]\n"
    );
}

#[test]
fn a_reload_takes_a_changed_script_file() {
    let dir = temp_dir("lua-reload");
    let script = dir.join("answer.lua");
    std::fs::write(&script, "ngx.say('version 1')\n").unwrap();
    let weir = Weir::start(&format!(
        "server: {{ workers: 2 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nrouters:\n  \
         answer: {{ rule: \"PathPrefix(`/`)\", lua: {{ content_file: \"{}\" }} }}\n",
        script.display()
    ));
    assert_eq!(get(weir.addr(), "localhost", "/").text(), "version 1\n");
    std::fs::write(&script, "ngx.say('version 2')\n").unwrap();
    weir.signal("HUP");
    weir.wait_for_line(": reloaded", 1);
    for _ in 0..4 {
        assert_eq!(get(weir.addr(), "localhost", "/").text(), "version 2\n");
    }
}

#[test]
fn weir_check_names_the_line_of_a_syntax_error() {
    let stderr = weir_check_refuses(
        "lua-inline",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r:\n    rule: \"Path(`/`)\"\n    lua:\n      content: |\n        local a = 1\n        ngx.say(a +)\n",
    );
    let (lines, path) = check_error_lines(&stderr);
    assert!(
        lines[0].starts_with(&format!(
            "{path}:9:1: Lua syntax error: {path}:9: unexpected symbol near ')'"
        )),
        "{stderr}"
    );
    let dir = temp_dir("lua-file");
    std::fs::write(
        dir.join("bad.lua"),
        "local x = 1\nif x then\n  ngx.say(x)\n",
    )
    .unwrap();
    let config = dir.join("weir.yaml");
    std::fs::write(
        &config,
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r: { rule: \"Path(`/`)\", lua: { content_file: bad.lua } }\n",
    )
    .unwrap();
    let out = weir_check(&config);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let script = dir.join("bad.lua");
    assert!(
        stderr.contains(&format!(
            "Lua syntax error: {}:4: 'end' expected",
            script.display()
        )),
        "{stderr}"
    );
}

#[test]
fn cjson_has_openrestys_array_additions() {
    // OpenResty's lua-cjson (not Debian's): `cjson.empty_array` and `cjson.array_mt` encode
    // as `[]` (openresty/lua-cjson's README, "empty_array", "array_mt").
    let weir = Weir::start(&one_script(
        "local cjson = require 'cjson'\nngx.say(cjson.encode({list = cjson.empty_array}), cjson.encode(setmetatable({}, cjson.array_mt)), cjson.encode(setmetatable({}, cjson.empty_array_mt)))",
        "",
        1,
    ));
    assert_eq!(
        get(weir.addr(), "localhost", "/").text(),
        "{\"list\":[]}[][]\n"
    );
}

#[test]
fn package_path_finds_a_module_and_init_file_runs() {
    let dir = temp_dir("lua-lib");
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(
        dir.join("lib/greet.lua"),
        "return { hello = function(n) return 'hello ' .. n end }\n",
    )
    .unwrap();
    std::fs::write(dir.join("init.lua"), "greet = require 'greet'\n").unwrap();
    let weir = Weir::start(&one_script(
        "ngx.say(greet.hello('weir'), ' ', require('greet') == greet)",
        &format!(
            "  package_path: \"{}/lib/?.lua;;\"\n  init_file: \"{}/init.lua\"\n",
            dir.display(),
            dir.display()
        ),
        1,
    ));
    assert_eq!(
        get(weir.addr(), "localhost", "/").text(),
        "hello weir true\n"
    );
}

#[test]
fn a_script_past_max_memory_fails_and_the_worker_serves_on() {
    let weir = Weir::start(&one_script(
        "if ngx.var.arg_big then local s = string.rep('x', 32 * 1024 * 1024) ngx.say(#s) end\nngx.say('fine')",
        "  max_memory: 8MiB\n",
        1,
    ));
    assert_eq!(get(weir.addr(), "localhost", "/?big=1").status, 500);
    let line = weir.wait_for_line("router `script`", 1);
    assert!(line.contains("memory"), "{line}");
    assert!(!weir.stderr().iter().any(|l| l.contains("no memory bound")));
    assert_eq!(get(weir.addr(), "localhost", "/").text(), "fine\n");
}

#[test]
fn the_log_phase_is_refused_until_weir_runs_it() {
    let stderr = weir_check_refuses(
        "lua-log-phase",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nmiddlewares:\n  m: { lua: { log: \"ngx.log(ngx.ERR, 'x')\" } }\nrouters:\n  r: { rule: \"Path(`/`)\", middlewares: [m], respond: {} }\n",
    );
    assert!(
        stderr.contains("middleware `m`")
            && stderr.contains("`log` phase is not run by this build of weir yet"),
        "{stderr}"
    );
}

#[test]
fn an_access_script_guards_a_proxied_route() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nlua:\n  shared_dicts: {{ seen: 1MiB }}\n\
         middlewares:\n  gate:\n    lua:\n      access: |\n        local key = ngx.var.http_x_key\n        if key ~= 'open' then ngx.exit(ngx.HTTP_FORBIDDEN) end\n        ngx.req.set_header('X-Seen', ngx.shared.seen:incr('n', 1, 0))\n      header_filter: \"ngx.header['X-Gate'] = 'passed'\"\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [gate], service: s }}\n\
         services:\n  s: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        upstream.addr
    ));
    assert_eq!(get(weir.addr(), "localhost", "/").status, 403);
    let resp = request(
        weir.addr(),
        "GET / HTTP/1.1\r\nHost: x\r\nX-Key: open\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(resp.status, 200);
    let json = resp.json();
    assert_eq!(json["name"], "up");
    assert_eq!(echoed_header(&json, "x-seen").as_deref(), Some("1"));
    assert_eq!(resp.header("X-Gate"), Some("passed"));
}
