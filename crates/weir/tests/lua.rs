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
    /// Asked twice, the second answer compared: it shows what the first one's `log` phase did.
    twice: bool,
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
        twice: false,
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
    const fn twice(mut self) -> Case {
        self.twice = true;
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
    case("say_whole_numbers", r#"ngx.say(42, " ", -7, " ", 0, " ", 99999999999999) ngx.print(-12, "\n")"#),
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
    // resty.core's dictionaries are tables (`{ zone }` with the methods in a metatable), so
    // `dict.get(dict, key)` works too; a key that is not a string is taken by its `tostring`.
    case("shdict_is_a_table", r##"local d = ngx.shared.d d:set(12, "twelve") ngx.say(type(d), " ", d.get(d, "12"), " ", d:get(12), " ", select("#", d:get("none")))"##),
    case("shdict_get_bad_keys", r#"local d = ngx.shared.d ngx.say(d:get(nil)) ngx.say(d:get("")) ngx.say(d:get({})) d:set(true, "t") ngx.say(d:get("true"), " ", d:get(true))"#),
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
    // ngx.ctx: "per-request Lua context data and has a life time identical to the current
    // request", the same table in rewrite, access, content, header_filter and log.
    case("ctx_every_phase", r#"ngx.ctx.trail = ngx.ctx.trail .. "c" ngx.say(ngx.ctx.trail)"#)
        .phases(&[
            ("rewrite", r#"ngx.ctx.trail = "r""#),
            ("access", r#"ngx.ctx.trail = ngx.ctx.trail .. "a""#),
            ("header_filter", r#"ngx.header["X-Trail"] = ngx.ctx.trail .. "h""#),
        ])
        .check(Check::Headers(&["X-Trail"])),
    case("ctx_replaced", r#"ngx.say(ngx.ctx.whole)"#)
        .phases(&[("access", r#"ngx.ctx = { whole = "new table" }"#)]),
    // ngx.var: a variable written in one phase is read in the later ones (`set $myvar` in
    // nginx's location); header_filter sees $remote_addr.
    case("var_across_phases", r#"ngx.say(ngx.var.myvar)"#)
        .phases(&[
            ("access", r#"ngx.var.myvar = "from access""#),
            ("header_filter", r#"ngx.header["X-Var"] = ngx.var.myvar ngx.header["X-Addr"] = ngx.var.remote_addr"#),
        ])
        .check(Check::Headers(&["X-Var", "X-Addr"])),
    // log_by_lua: "runs after the response has been sent"; ngx.var.status, $body_bytes_sent
    // (nginx's counts its chunked framing: 14 for "nil\n", weir's 4), $request_time and
    // ngx.ctx there; its effect seen through ngx.shared by the next request.
    case("log_phase", r#"ngx.status = 201 ngx.ctx.from = "content" ngx.say(ngx.shared.d:get("log_phase"))"#)
        .phases(&[("log", r#"ngx.shared.d:set("log_phase", table.concat({ngx.var.status, ngx.ctx.from, tostring(tonumber(ngx.var.body_bytes_sent) >= 4), tostring(tonumber(ngx.var.request_time) < 5), tostring(ngx.var.upstream_addr)}, " "))"#)])
        .twice(),
    case("log_after_access_exit", r#"ngx.say(ngx.shared.d:get("log_after_access_exit"))"#)
        .phases(&[
            ("access", r#"ngx.var.myvar = "set" if not ngx.shared.d:get("refused") then ngx.shared.d:set("refused", 1) ngx.exit(403) end"#),
            ("log", r#"ngx.shared.d:set("log_after_access_exit", ngx.var.status .. " " .. ngx.var.myvar)"#),
        ])
        .twice(),
    // body_filter_by_lua: "the input data chunk is passed via ngx.arg[1] (as a Lua string
    // value) and the "eof" flag indicating the end of the response body data stream is passed
    // via ngx.arg[2]"; "the output data stream can be truncated immediately by running
    // ngx.arg[2] = true"; "set ngx.arg[1] to a nil value or an empty Lua string" to drop a
    // chunk; "it is required to always clear out the Content-Length response header (if any)
    // in a header filter". Each case gives the same answer whatever the pieces are.
    case("body_filter_upper", r#"ngx.say("hello") ngx.print("world", 42)"#)
        .phases(&[
            ("header_filter", "ngx.header.content_length = nil"),
            ("body_filter", "ngx.arg[1] = string.upper(ngx.arg[1])"),
        ]),
    case("body_filter_replaces_all", r#"ngx.say("dropped") ngx.say("too")"#)
        .phases(&[("body_filter", r#"if ngx.arg[2] then ngx.arg[1] = {"only ", "the end\n"} else ngx.arg[1] = nil end"#)]),
    case("body_filter_ends_early", r#"ngx.say("hello world") ngx.say("never sent")"#)
        .phases(&[("body_filter", "ngx.arg[1] = string.sub(ngx.arg[1], 1, 5) ngx.arg[2] = true")]),
    case("body_filter_ctx_counts", r#"ngx.ctx.from = "content" ngx.say("twelve bytes") ngx.print("and ten ..")"#)
        .phases(&[("body_filter", r#"ngx.ctx.n = (ngx.ctx.n or 0) + #ngx.arg[1] if ngx.arg[2] then ngx.arg[1] = ngx.arg[1] .. ngx.ctx.from .. " " .. ngx.ctx.n .. " " .. ngx.status end"#)]),
    case("body_filter_sees_status_and_var", r#"ngx.status = 202 ngx.var.myvar = "v" ngx.say("body")"#)
        .phases(&[("body_filter", r#"if ngx.arg[2] then ngx.arg[1] = ngx.status .. " " .. ngx.var.myvar .. " " .. ngx.var.remote_addr end"#)]),
    // ngx.req.set_method: "Overrides the current request's request method"; the content
    // handler and $request_method see the new one.
    case("set_method_written_back", r#"ngx.say(ngx.req.get_method(), " ", ngx.var.request_method)"#)
        .phases(&[("rewrite", "ngx.req.set_method(ngx.HTTP_PUT)")]),
    // An answer made in access goes through the output filters like any other: the
    // location's header_filter_by_lua and body_filter_by_lua see it.
    case("access_answer_filtered", r#"ngx.say("content ran")"#)
        .phases(&[
            ("access", r#"ngx.status = 201 ngx.say("from access") ngx.exit(ngx.HTTP_OK)"#),
            ("header_filter", r#"ngx.header["X-HF"] = "saw " .. ngx.status"#),
            ("body_filter", "ngx.arg[1] = string.upper(ngx.arg[1])"),
        ])
        .check(Check::Headers(&["X-HF"])),
    case("access_exit_filtered", r#"ngx.say("content ran")"#)
        .phases(&[
            ("access", "ngx.exit(ngx.HTTP_FORBIDDEN)"),
            ("header_filter", r#"ngx.header["X-HF"] = "saw " .. ngx.status"#),
        ])
        .check(Check::StatusHeaders(&["X-HF"])),
    // The request body in rewrite and access: ngx.req.read_body "reads the client request
    // body synchronously without blocking the Nginx event loop", then get_body_data,
    // get_post_args; set_body_data replaces it for what follows (and its Content-Length).
    case("access_reads_body", r#"ngx.req.read_body() ngx.say(ngx.var.http_x_len, " ", ngx.req.get_body_data())"#)
        .phases(&[("access", r#"ngx.req.read_body() ngx.req.set_header("X-Len", #ngx.req.get_body_data())"#)])
        .body("a=1&b=two"),
    case("rewrite_post_args", r#"ngx.say(ngx.ctx.b, " ", ngx.ctx.later)"#)
        .phases(&[
            ("rewrite", "ngx.req.read_body() ngx.ctx.b = ngx.req.get_post_args().b"),
            ("access", "ngx.ctx.later = ngx.req.get_body_data()"),
        ])
        .body("a=1&b=two"),
    case("access_set_body", r#"ngx.req.read_body() ngx.say(ngx.req.get_body_data(), " ", ngx.var.content_length)"#)
        .phases(&[("access", r#"ngx.req.read_body() ngx.req.set_body_data("replaced=" .. ngx.req.get_body_data())"#)])
        .body("a=1"),
    case("access_no_body_read", r#"ngx.req.read_body() ngx.say(ngx.req.get_body_data())"#)
        .phases(&[("access", "ngx.req.read_body() ngx.ctx.none = ngx.req.get_body_data()")]),
    // ngx.exec: "Does an internal redirect to uri with args"; "This method never returns";
    // the new location runs all its phases with an empty ngx.ctx (internal redirects "destroy
    // the original request ngx.ctx data"); nginx stops a cycle after 10 with a 500.
    case("exec_target", r#"ngx.say("target ", ngx.var.uri, " ", ngx.var.args, " ", tostring(ngx.ctx.x), " ", ngx.req.get_method())"#),
    case("exec_content", r#"ngx.ctx.x = 1 ngx.exec("/case/exec_target", "a=1&b=2") ngx.say("not here")"#),
    case("exec_access", r#"ngx.say("not reached")"#)
        .phases(&[("access", r#"ngx.ctx.x = 2 ngx.exec("/case/exec_target?q=1", {b = "two"})"#)]),
    case("exec_no_args", r#"ngx.exec("/case/exec_target")"#).query("dropped=1"),
    case("exec_cycle", r#"ngx.exec("/case/exec_cycle")"#).check(Check::StatusHeaders(&[])),
    case("exec_nowhere", r#"ngx.exec("/case/no_such_case")"#).check(Check::StatusHeaders(&[])),
    // ngx.get_phase: "Retrieves the current running phase name" (init, init_worker,
    // rewrite, access, content, header_filter, body_filter, log, timer).
    case("get_phase", r#"ngx.say(ngx.ctx.seen, " ", ngx.get_phase(), " [", init_phases, "]")"#)
        .phases(&[
            ("rewrite", "ngx.ctx.seen = ngx.get_phase()"),
            ("access", r#"ngx.ctx.seen = ngx.ctx.seen .. " " .. ngx.get_phase()"#),
            ("header_filter", r#"ngx.header["X-Phase"] = ngx.get_phase() ngx.header.content_length = nil"#),
            ("body_filter", r#"if ngx.arg[2] then ngx.arg[1] = (ngx.arg[1] or "") .. ngx.get_phase() .. "\n" end"#),
            ("log", r#"ngx.shared.d:set("log_phase", ngx.get_phase())"#),
        ])
        .check(Check::Headers(&["X-Phase"]))
        .twice(),
    case("get_phase_log_and_timer", r#"ngx.say(ngx.shared.d:get("log_phase"))
ngx.timer.at(0, function() ngx.shared.d:set("timer_phase", ngx.get_phase()) end)
for _ = 1, 50 do if ngx.shared.d:get("timer_phase") then break end ngx.sleep(0.01) end
ngx.say(ngx.shared.d:get("timer_phase"))"#),
    // ngx.worker.id: "a number from 0 to N - 1"; ngx.worker.count: "the total number of
    // the Nginx worker processes"; ngx.worker.exiting: "whether the current Nginx worker
    // process already starts exiting"; ngx.worker.pid: "the same as ngx.var.pid".
    // ngx.config.subsystem, nginx_version, ngx_lua_version; ngx.config.prefix: "the Nginx
    // server prefix path" (the value differs: asserted in weir only).
    case("worker_and_config", r#"ngx.say(ngx.worker.id(), " ", ngx.worker.count(), " ", ngx.worker.exiting(), " ", ngx.worker.pid() == tonumber(ngx.var.pid or ngx.worker.pid()), " ", type(ngx.worker.pid()))
ngx.say(ngx.config.subsystem, " ", ngx.config.nginx_version, " ", ngx.config.ngx_lua_version, " ", ngx.config.prefix():sub(1, 1), ngx.config.prefix():sub(-1), " ", type(ngx.config.nginx_configure()), " ", type(ngx.config.debug))
ngx.say(worker_in_init_worker)"#),
    case("coroutines", r#"local co = coroutine.wrap(function() coroutine.yield(1) coroutine.yield(2) end) ngx.say(co(), co())"#),
    // ngx.flush: "Flushes response output to the client"; "returns 1 on success, or
    // returns nil and a string describing the error otherwise". Once flushed, the answer is
    // chunked in both (nginx chunks every Lua answer; weir those that flushed), and the
    // head is out: a header set after it is not sent.
    case("flush_wait", r#"ngx.say("one")
local ok, err = ngx.flush(true)
ngx.say(ok, " ", err)
ngx.print("two")
ngx.say(ngx.flush())
ngx.header["X-Late"] = "late"
ngx.say(ngx.flush(true))"#)
        .check(Check::Headers(&["Content-Type", "Transfer-Encoding", "X-Late"])),
    // "nothing to flush" before any output; a flush with nothing new since the last.
    case("flush_nothing", r#"local ok, err = ngx.flush()
ngx.header["X-Flush"] = tostring(ok) .. " " .. tostring(err)
ngx.say("out")
ngx.say(ngx.flush(true))
ngx.say(ngx.flush(true))"#)
        .check(Check::Headers(&["Content-Type", "Transfer-Encoding", "X-Flush"])),
    // Flushes among sleeps and inside a coroutine the script made, then ngx.exit(ngx.OK).
    case("flush_sleeps_and_coroutines", r#"for i = 1, 3 do ngx.say("piece ", i) ngx.flush(true) ngx.sleep(0.001) end
local co = coroutine.wrap(function() ngx.say("inner") local ok = ngx.flush(true) coroutine.yield(ok) ngx.say("inner again") return ngx.flush() end)
ngx.say("yielded ", co())
ngx.say("returned ", co())
ngx.exit(ngx.OK)
ngx.say("not reached")"#)
        .check(Check::Headers(&["Content-Type", "Transfer-Encoding"])),
    // ngx.eof: "Explicitly specify the end of the response output stream"; the script goes
    // on, its later output and flushes answering "seen eof" (what the first request's script
    // noted, the second shows).
    case("eof_then_more", r#"ngx.say("before: ", ngx.shared.d:get("after_eof"))
local ok, err = ngx.eof()
local said, why = ngx.say("dropped")
local flushed, fwhy = ngx.flush(true)
local again, awhy = ngx.eof()
ngx.shared.d:set("after_eof", table.concat({tostring(ok), tostring(err), tostring(said), why, tostring(flushed), fwhy, tostring(again), awhy}, " "))"#)
        .twice(),
    // A 204's head is sent alone: nginx marks the request `header_only`, and a flush answers
    // "header only" (noted, then shown by the next case).
    case("flush_204", r#"ngx.status = 204 ngx.say("x") local ok, err = ngx.flush(true) ngx.shared.d:set("flush_204", tostring(ok) .. " " .. tostring(err))"#)
        .check(Check::StatusHeaders(&[])),
    case("flush_204_noted", r#"ngx.say(ngx.shared.d:get("flush_204"))"#),
    // Without a flush too: a 204's body is dropped (nginx's header_only; RFC 9110 6.4.1).
    case("status_204_drops_the_body", r#"ngx.status = 204 ngx.header["X-Kept"] = "1" ngx.say("dropped")"#),
    // ngx.eof after flushes: the streamed answer ends there.
    case("flush_then_eof", r#"ngx.say("streamed") ngx.flush(true) ngx.say("last") ngx.eof() ngx.say("dropped")"#)
        .check(Check::Headers(&["Content-Type", "Transfer-Encoding"])),
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
        "lua_shared_dict d 1m; lua_shared_dict k 64k; lua_shared_dict f 64k;\n  \
         init_by_lua_block { init_phases = ngx.get_phase() }\n  \
         init_worker_by_lua_block { init_phases = init_phases .. ' ' .. ngx.get_phase() \
         worker_in_init_worker = ngx.worker.id() .. ' ' .. ngx.worker.count() .. ' ' .. tostring(ngx.worker.exiting()) }",
    );
    let weir = Weir::start(&weir_lua_cases(
        &scripts,
        &names,
        1,
        "  shared_dicts: { d: 1MiB, k: 64KiB, f: 64KiB }\n  \
         init: \"init_phases = ngx.get_phase()\"\n  \
         init_worker: \"init_phases = init_phases .. ' ' .. ngx.get_phase() \
         worker_in_init_worker = ngx.worker.id() .. ' ' .. ngx.worker.count() .. ' ' .. tostring(ngx.worker.exiting())\"\n",
    ));
    let mut differences = Vec::new();
    let mut answers = std::collections::HashMap::new();
    for c in CASES {
        if c.twice {
            ask(nginx.addr, c);
            ask(weir.addr(), c);
        }
        let expected = ask(nginx.addr, c);
        let got = ask(weir.addr(), c);
        answers.insert(c.name, got.text());
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
    // What the newer cases are about shows in weir's answers (not both servers failing alike).
    for (name, expected) in [
        (
            "get_phase",
            "rewrite access content [init init_worker]\nbody_filter\n",
        ),
        ("get_phase_log_and_timer", "log\ntimer\n"),
        ("flush_204_noted", "nil header only\n"),
        (
            "eof_then_more",
            "before: 1 nil nil seen eof nil seen eof nil seen eof\n",
        ),
        (
            "worker_and_config",
            "0 1 false true number\nhttp 1022001 10023 // string boolean\n0 1 false\n",
        ),
    ] {
        assert_eq!(answers[name], expected, "{name}");
    }
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

/// What differs from nginx by nature: `ngx.worker.pid()` is weir's process (its workers are
/// threads), `ngx.config.prefix()` the config file's folder, `debug` false and
/// `nginx_configure()` empty; each of two workers has its own `ngx.worker.id()`.
#[test]
fn worker_pid_and_config_prefix_are_weirs_own() {
    let weir = Weir::start(&one_script(
        "ngx.say(ngx.worker.pid(), ' ', ngx.config.prefix(), ' ', tostring(ngx.config.debug), \
         ' [', ngx.config.nginx_configure(), '] ', ngx.worker.count(), ' ', ngx.worker.id())",
        "",
        2,
    ));
    let prefix = format!("{} {}/ false [] 2 ", weir.child.id(), weir.dir.display());
    let mut ids = std::collections::BTreeSet::new();
    // New connections spread over both workers' listening sockets.
    for _ in 0..40 {
        let text = get(weir.addr(), "localhost", "/").text();
        let id = text
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{text}"));
        ids.insert(id.trim().to_string());
    }
    assert!(ids.iter().all(|id| id == "0" || id == "1"), "{ids:?}");
}

/// ngx.worker.exiting: true for a script still running once a graceful stop has begun.
#[test]
fn worker_exiting_is_true_while_a_stop_drains() {
    let weir = Weir::start(&one_script(
        "local before = ngx.worker.exiting()\n\
         for _ = 1, 500 do if ngx.worker.exiting() then break end ngx.sleep(0.01) end\n\
         ngx.say(before, ' ', ngx.worker.exiting())",
        "",
        1,
    ));
    let addr = weir.addr();
    let waiting = std::thread::spawn(move || get(addr, "localhost", "/").text());
    // The request is running when the stop comes (it waits up to 5 s for it).
    std::thread::sleep(Duration::from_millis(300));
    weir.signal("TERM");
    assert_eq!(waiting.join().unwrap(), "false true\n");
}

#[test]
fn coroutines_serve_on_after_exits_errors_and_rust_errors() {
    // One worker: every request reuses the coroutines the ones before left (or not).
    let weir = Weir::start(&one_script(
        "if ngx.var.arg_exit then ngx.exit(403) end\n\
         if ngx.var.arg_fail then error('failed on purpose') end\n\
         if ngx.var.arg_status then ngx.status = 'not a number' end\n\
         if ngx.var.arg_sleep then ngx.sleep(0.01) end\n\
         ngx.say('fine ', ngx.var.uri)",
        "",
        1,
    ));
    for round in 0..3 {
        let path = format!("/r{round}");
        for (query, status) in [("exit=1", 403), ("fail=1", 500), ("status=1", 500)] {
            let resp = get(weir.addr(), "localhost", &format!("{path}?{query}"));
            assert_eq!(resp.status, status, "{query}");
            let resp = get(weir.addr(), "localhost", &format!("{path}?sleep=1"));
            assert_eq!(resp.text(), format!("fine {path}\n"));
            let resp = get(weir.addr(), "localhost", &path);
            assert_eq!(resp.text(), format!("fine {path}\n"));
        }
    }
    // A Rust function's error is logged with its message, as a Lua error is.
    let line = weir.wait_for_line("ngx.status must be a number", 1);
    assert!(line.contains("router `script`"), "{line}");
    let line = weir.wait_for_line("failed on purpose", 1);
    assert!(line.contains("router `script`"), "{line}");
}

#[test]
fn an_answer_like_the_last_is_sent_again_and_one_that_differs_is_not() {
    let weir = Weir::start(&one_script(
        "if ngx.var.arg_a then ngx.header['X-A'] = ngx.var.arg_a end\n\
         if ngx.var.arg_type then ngx.header.content_type = ngx.var.arg_type end\n\
         if ngx.var.arg_status then ngx.status = tonumber(ngx.var.arg_status) end\n\
         ngx.print(ngx.var.arg_body or 'same')",
        "",
        1,
    ));
    let cases = [
        ("", 200, None, "text/plain", "same"),
        ("", 200, None, "text/plain", "same"),
        ("a=1", 200, Some("1"), "text/plain", "same"),
        ("a=2", 200, Some("2"), "text/plain", "same"),
        ("a=2", 200, Some("2"), "text/plain", "same"),
        ("", 200, None, "text/plain", "same"),
        ("type=text/html", 200, None, "text/html", "same"),
        ("type=text/plain", 200, None, "text/plain", "same"),
        ("", 200, None, "text/plain", "same"),
        ("status=201", 201, None, "text/plain", "same"),
        ("body=other", 200, None, "text/plain", "other"),
        ("body=same", 200, None, "text/plain", "same"),
        ("", 200, None, "text/plain", "same"),
    ];
    for (query, status, a, content_type, body) in cases {
        let resp = get(weir.addr(), "localhost", &format!("/?{query}"));
        assert_eq!(resp.status, status, "{query}");
        assert_eq!(resp.header("x-a"), a, "{query}");
        assert_eq!(resp.header("content-type"), Some(content_type), "{query}");
        assert_eq!(resp.text(), body, "{query}");
    }
}

/// A body past what the h1 driver copies after the head (16 KiB) goes out from its own
/// buffer: every byte, its length, HEAD and keep-alive as for a small one.
#[test]
fn bodies_small_and_large_arrive_whole_on_one_kept_connection() {
    let weir = Weir::start(&one_script(
        "local n = tonumber(ngx.var.arg_n)\n\
         local unit = '0123456789abcdefghijklmnopqrstuvwxyz'\n\
         local s = string.rep(unit, math.floor(n / #unit) + 1):sub(1, n)\n\
         ngx.print(s)",
        "",
        1,
    ));
    let unit = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut conn = Conn::open(weir.addr());
    for n in [
        0usize,
        5,
        16 * 1024,
        16 * 1024 + 1,
        1 << 20,
        (1 << 20) + 7,
        3,
    ] {
        for method in ["GET", "HEAD"] {
            let head = method == "HEAD";
            conn.send(format!("{method} /?n={n} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes());
            let resp = conn.read(head).expect("an answer on the kept connection");
            assert_eq!(resp.status, 200, "{method} {n}");
            assert_eq!(
                resp.header("content-length"),
                Some(n.to_string().as_str()),
                "{method} {n}"
            );
            let expected: Vec<u8> = if head {
                Vec::new()
            } else {
                unit.iter().copied().cycle().take(n).collect()
            };
            assert!(
                resp.body == expected,
                "{method} {n}: the body differs ({} bytes)",
                resp.body.len()
            );
        }
    }
}

#[test]
fn what_weir_lacks_is_an_error_naming_it() {
    let weir = Weir::start(&one_script(
        "local ok, err = pcall(ngx.location.capture, '/x')\nngx.say(ok, ' ', err)\nngx.req.socket()",
        "",
        1,
    ));
    let resp = get(weir.addr(), "localhost", "/");
    assert_eq!(resp.status, 500);
    let line = weir.wait_for_line("ngx.req.socket is not supported by weir", 1);
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
fn inits_shared_dict_writes_happen_once_for_every_worker() {
    let weir = Weir::start(&one_script(
        "local c = ngx.shared.counters\nngx.print(c:get('inits'), ' ', init_saw, ' ', c:get('first'), ' ', worker_tag)",
        "  init: \"init_saw = ngx.shared.counters:incr('inits', 1, 0) ngx.shared.counters:set('first', 'yes')\"\n  \
         init_worker: \"worker_tag = string.sub(tostring({}), 8)\"\n",
        2,
    ));
    // Each connection lands on a worker by its address: ask until both answered.
    let mut tags = std::collections::HashSet::new();
    for _ in 0..200 {
        let text = get(weir.addr(), "localhost", "/").text();
        let (seen, tag) = text.rsplit_once(' ').unwrap();
        // `init` ran in each VM (its global is there) but counted once.
        assert_eq!(seen, "1 1 yes", "{text}");
        tags.insert(tag.to_string());
        if tags.len() == 2 {
            break;
        }
    }
    assert_eq!(tags.len(), 2, "both workers answered");
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
fn the_log_phase_sees_the_proxied_answer_and_writes_to_a_shared_dict() {
    let upstream = Upstream::start("up");
    // One worker: the log phase runs before it takes the next connection (with two, the
    // client may ask the other worker before the first one's log phase ran, as in nginx).
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nlua:\n  shared_dicts: {{ seen: 1MiB }}\n\
         middlewares:\n  logged:\n    lua:\n      access: \"ngx.ctx.asked = ngx.var.uri\"\n      log: |\n        ngx.shared.seen:set('last', table.concat({{ngx.var.status, ngx.var.upstream_addr, ngx.var.body_bytes_sent, ngx.ctx.asked}}, ' '))\n        ngx.shared.seen:incr('logged', 1, 0)\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/api`)\", middlewares: [logged], service: s }}\n  \
         peek: {{ rule: \"Path(`/peek`)\", lua: {{ content: \"ngx.print(ngx.shared.seen:get('last'), ' ', ngx.shared.seen:get('logged'))\" }} }}\n\
         services:\n  s: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        upstream.addr
    ));
    let proxied = get(weir.addr(), "localhost", "/api/x");
    assert_eq!(proxied.status, 200);
    let length = proxied.body.len();
    assert_eq!(
        get(weir.addr(), "localhost", "/peek").text(),
        format!("200 {} {length} /api/x 1", upstream.addr)
    );
}

/// A `lua` middleware whose `body_filter` upper-cases each piece, counts the pieces in
/// `ngx.ctx` and appends `!` and the count at the end (so the length changes), before a
/// static folder and a proxied service.
fn body_filter_config(files: &std::path::Path, upstream: std::net::SocketAddr) -> String {
    format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nlua: {{}}\n\
         middlewares:\n  upper:\n    lua:\n      body_filter: |\n        ngx.ctx.pieces = (ngx.ctx.pieces or 0) + 1\n        local piece = string.upper(ngx.arg[1])\n        if ngx.arg[2] then piece = piece .. '!' .. ngx.ctx.pieces end\n        ngx.arg[1] = piece\n\
         routers:\n  files: {{ rule: \"PathPrefix(`/files`)\", middlewares: [upper], static: {{ root: \"{}\" }} }}\n  \
         api: {{ rule: \"PathPrefix(`/api`)\", middlewares: [upper], service: s }}\n\
         services:\n  s: {{ servers: [{{ url: \"http://{upstream}\" }}] }}\n",
        files.display()
    )
}

#[test]
fn a_body_filter_rewrites_static_and_proxied_bodies_and_their_length() {
    let files = temp_dir("lua-body-filter");
    std::fs::create_dir_all(files.join("files")).unwrap();
    std::fs::write(files.join("files/small.txt"), "small file\n").unwrap();
    // Past the size weir filters whole (256 KiB): streamed through the filter in pieces.
    let big = "abcdefgh".repeat(128 * 1024);
    std::fs::write(files.join("files/big.txt"), &big).unwrap();
    let upstream = Upstream::start("up");
    let weir = Weir::start(&body_filter_config(&files, upstream.addr));

    let small = get(weir.addr(), "localhost", "/files/small.txt");
    assert_eq!(small.status, 200);
    // Held whole: one piece, then the end; the length is the filtered one.
    assert_eq!(small.text(), "SMALL FILE\n!2");
    assert_eq!(small.header("Content-Length"), Some("13"));

    let streamed = get(weir.addr(), "localhost", "/files/big.txt");
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.header("Content-Length"), None);
    assert_eq!(streamed.header("Transfer-Encoding"), Some("chunked"));
    let text = streamed.text();
    let (body, pieces) = text.rsplit_once('!').unwrap();
    assert_eq!(body, big.to_uppercase());
    let pieces: usize = pieces.parse().unwrap();
    assert!(pieces > 2, "a 1 MiB file in {pieces} pieces");

    let proxied = get(weir.addr(), "localhost", "/api/x");
    assert_eq!(proxied.status, 200);
    assert_eq!(proxied.header("Content-Length"), None);
    let text = proxied.text();
    assert!(
        text.starts_with('{') && text.contains("\"NAME\":\"UP\""),
        "{text}"
    );
    assert!(text.contains("}!"), "{text}");
}

#[test]
fn a_body_filter_inside_compress_filters_the_body_compress_then_encodes() {
    use std::io::Read;
    let files = temp_dir("lua-body-gzip");
    std::fs::create_dir_all(files.join("files")).unwrap();
    let text = "compress me please, ".repeat(200);
    std::fs::write(files.join("files/page.txt"), &text).unwrap();
    let upstream = Upstream::start("up");
    let yaml = body_filter_config(&files, upstream.addr)
        .replace(
            "middlewares: [upper], static",
            "middlewares: [gz, upper], static",
        )
        .replace(
            "middlewares:\n  upper:",
            "middlewares:\n  gz: { compress: {} }\n  upper:",
        );
    let weir = Weir::start(&yaml);
    let resp = request(
        weir.addr(),
        "GET /files/page.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("Content-Encoding"), Some("gzip"));
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&resp.body[..])
        .read_to_string(&mut plain)
        .unwrap();
    assert_eq!(plain, format!("{}!2", text.to_uppercase()));
}

#[test]
fn a_streamed_body_is_filtered_piece_by_piece_as_it_comes() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let release = Arc::new(AtomicBool::new(false));
    let released = release.clone();
    let upstream = RawUpstream::start(move |conn| {
        if conn.read_head().is_none() {
            return;
        }
        conn.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n");
        // The second piece only once the client saw the first, filtered.
        let waited = Instant::now();
        while !released.load(Ordering::SeqCst) && waited.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        conn.write(b"6\r\nsecond\r\n0\r\n\r\n");
    });
    let files = temp_dir("lua-body-stream");
    let weir = Weir::start(&body_filter_config(&files, upstream.addr));
    let mut client = std::net::TcpStream::connect(weir.addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    client
        .write_all(b"GET /api/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("FIRST") {
        let n = client.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before the first piece: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&got).contains("SECOND"));
    release.store(true, Ordering::SeqCst);
    client.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("SECOND"), "{text}");
    // Three pieces: `first`, `second`, and the end.
    assert!(text.ends_with("!3\r\n0\r\n\r\n"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("content-length"),
        "{text}"
    );
}

#[test]
fn a_method_set_in_rewrite_is_the_one_the_upstream_gets() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nlua: {{}}\n\
         middlewares:\n  m: {{ lua: {{ rewrite: \"ngx.req.set_method(ngx.HTTP_DELETE)\" }} }}\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [m], service: s }}\n\
         services:\n  s: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        upstream.addr
    ));
    let resp = get(weir.addr(), "localhost", "/x");
    assert_eq!(resp.json()["method"], "DELETE");
}

#[test]
fn a_body_set_in_access_is_what_the_upstream_gets_with_its_length() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nlua: {{}}\n\
         middlewares:\n  m:\n    lua:\n      access: |\n        ngx.req.read_body()\n        local body = ngx.req.get_body_data()\n        if ngx.var.arg_replace then ngx.req.set_body_data(string.upper(body) .. '!') end\n        ngx.req.set_header('X-Read', #body)\n\
         routers:\n  r: {{ rule: \"PathPrefix(`/`)\", middlewares: [m], service: s }}\n\
         services:\n  s: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        upstream.addr
    ));
    let post = |target: &str, framing: &str, body: &str| {
        request(
            weir.addr(),
            &format!(
                "POST {target} HTTP/1.1\r\nHost: x\r\n{framing}Connection: close\r\n\r\n{body}"
            ),
        )
        .json()
    };
    // Read in access, then sent on as it was.
    let json = post("/kept", "Content-Length: 5\r\n", "hello");
    assert_eq!(json["body"], "hello");
    assert_eq!(echoed_header(&json, "x-read").as_deref(), Some("5"));
    // Replaced: the new body with its own length, from a chunked one too.
    let json = post("/new?replace=1", "Content-Length: 5\r\n", "hello");
    assert_eq!(json["body"], "HELLO!");
    assert_eq!(echoed_header(&json, "content-length").as_deref(), Some("6"));
    let json = post(
        "/new?replace=1",
        "Transfer-Encoding: chunked\r\n",
        "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    );
    assert_eq!(json["body"], "ABCDE!");
    assert_eq!(echoed_header(&json, "content-length").as_deref(), Some("6"));
    assert_eq!(echoed_header(&json, "transfer-encoding"), None);
}

#[test]
fn ngx_exec_sends_a_request_and_its_body_on_to_a_proxied_route() {
    let upstream = Upstream::start("up");
    let weir = Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nlua: {{}}\n\
         routers:\n  front: {{ rule: \"Path(`/front`)\", lua: {{ content: \"ngx.req.read_body() ngx.exec('/api/' .. ngx.req.get_body_data(), {{ from = 'front' }})\" }} }}\n  \
         api: {{ rule: \"PathPrefix(`/api`)\", service: s }}\n\
         services:\n  s: {{ servers: [{{ url: \"http://{}\" }}] }}\n",
        upstream.addr
    ));
    let resp = request(
        weir.addr(),
        "POST /front HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnext",
    );
    assert_eq!(resp.status, 200);
    let json = resp.json();
    assert_eq!(json["name"], "up");
    assert_eq!(json["method"], "POST");
    assert_eq!(json["body"], "next");
    assert_eq!(json["target"], "/api/next?from=front");
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

/// A script that prints, flushes and then waits for the test's word (`/case/go` sets it in
/// `ngx.shared`), and the one that says it.
const STREAM_SCRIPTS: [(&str, &str); 2] = [
    (
        "stream",
        r#"ngx.shared.d:delete("go")
ngx.header["X-Stream"] = "yes"
ngx.say("first")
ngx.flush(true)
while not ngx.shared.d:get("go") do ngx.sleep(0.01) end
ngx.say("second")"#,
    ),
    ("go", r#"ngx.shared.d:set("go", true) ngx.say("went")"#),
];

/// The stream scripts in a folder, and their names for `NginxLua::start`/`weir_lua_cases`.
fn stream_scripts(
    extra: &[(&str, &str)],
) -> (
    std::path::PathBuf,
    Vec<(&'static str, &'static [&'static str])>,
) {
    let dir = temp_dir("lua-stream");
    let mut names: Vec<(&'static str, &'static [&'static str])> = Vec::new();
    for (name, script) in STREAM_SCRIPTS.iter().chain(extra) {
        std::fs::write(dir.join(format!("{name}.lua")), script).unwrap();
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        names.push((name, &[]));
    }
    (dir, names)
}

/// nginx and weir running the stream scripts and `extra`, each with the shared dict `d`.
fn stream_servers(extra: &[(&str, &str)]) -> (NginxLua, Weir) {
    let (scripts, names) = stream_scripts(extra);
    let nginx = NginxLua::start(&scripts, &names, "lua_shared_dict d 1m;");
    let weir = Weir::start(&weir_lua_cases(
        &scripts,
        &names,
        1,
        "  shared_dicts: { d: 1MiB }\n",
    ));
    (nginx, weir)
}

/// Reads from `from` into `got` until it holds `what`.
fn read_until(from: &mut impl std::io::Read, got: &mut Vec<u8>, what: &str) {
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(got).contains(what) {
        let n = from.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "ended before {what:?}: {:?}",
            String::from_utf8_lossy(got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn flushed_output_reaches_the_client_while_the_script_waits_in_nginx_and_weir() {
    use std::io::{Read, Write};
    let extra = [
        // An HTTP/1.0 client's answer is gathered whole, with its length (nginx's
        // `lua_http10_buffering`): flushing does nothing.
        (
            "h10",
            r#"ngx.say("a") local ok, err = ngx.flush(true) ngx.say(tostring(ok), " ", err)"#,
        ),
        // An error once the head is out cuts the answer short: no last chunk.
        (
            "late_error",
            r#"ngx.say("a") ngx.flush(true) error("late failure")"#,
        ),
    ];
    let (nginx, weir) = stream_servers(&extra);
    for (server, addr) in [("nginx", nginx.addr), ("weir", weir.addr())] {
        let old = request(addr, "GET /case/h10 HTTP/1.0\r\nHost: x\r\n\r\n");
        assert_eq!(old.text(), "a\nnil buffering\n", "{server}");
        assert_eq!(old.header("content-length"), Some("16"), "{server}");
        let mut cut = std::net::TcpStream::connect(addr).unwrap();
        cut.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        cut.write_all(b"GET /case/late_error HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut raw = Vec::new();
        let _ = cut.read_to_end(&mut raw);
        let raw = String::from_utf8_lossy(&raw);
        assert!(raw.contains("\r\n\r\n2\r\na\n\r\n"), "{server}: {raw}");
        assert!(!raw.ends_with("0\r\n\r\n"), "{server}: {raw}");
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        client
            .write_all(b"GET /case/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        read_until(&mut client, &mut got, "first\n");
        let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
        assert!(!text.contains("second"), "{server}: {text}");
        assert!(
            text.contains("transfer-encoding: chunked"),
            "{server}: {text}"
        );
        assert!(text.contains("x-stream: yes"), "{server}: {text}");
        assert_eq!(get(addr, "x", "/case/go").text(), "went\n", "{server}");
        client.read_to_end(&mut got).unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.ends_with("\r\n7\r\nsecond\n\r\n0\r\n\r\n"),
            "{server}: {text}"
        );
    }
}

/// lua-nginx-module's README, `ngx.flush`: "when called without wait=true (the default),
/// it runs asynchronously: returns immediately without waiting for output data to be written
/// into the system send buffer"; with `true`, it returns once the output is written. Here a
/// 16 MiB piece cannot be written while the client reads nothing.
#[test]
fn a_flush_without_true_returns_before_its_output_is_written_in_nginx_and_weir() {
    use std::io::{Read, Write};
    const BIG: usize = 16 << 20;
    let flushing = |key: &str, wait: &str| {
        format!(
            r#"ngx.shared.d:delete("{key}")
ngx.print(("x"):rep({BIG}))
local ok, err = ngx.flush({wait})
ngx.shared.d:set("{key}", tostring(ok) .. " " .. tostring(err))
ngx.print("end")"#
        )
    };
    let (queued, waited) = (flushing("queued", ""), flushing("waited", "true"));
    let seen = r#"ngx.print(tostring(ngx.shared.d:get(ngx.var.arg_k)))"#;
    let extra = [
        ("queued", queued.as_str()),
        ("waited", waited.as_str()),
        ("seen", seen),
    ];
    let (nginx, weir) = stream_servers(&extra);
    for (server, addr) in [("nginx", nginx.addr), ("weir", weir.addr())] {
        let seen = |key: &str| get(addr, "x", &format!("/case/seen?k={key}")).text();
        for (key, returns_at_once) in [("queued", true), ("waited", false)] {
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            client
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            client
                .write_all(
                    format!("GET /case/{key} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .unwrap();
            if returns_at_once {
                // The script runs on while nothing is read.
                let deadline = Instant::now() + Duration::from_secs(10);
                while seen(key) != "1 nil" {
                    assert!(
                        Instant::now() < deadline,
                        "{server}: the flush did not return"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            } else {
                std::thread::sleep(Duration::from_millis(300));
                assert_eq!(
                    seen(key),
                    "nil",
                    "{server}: the flush returned before its output was written"
                );
            }
            let mut raw = Vec::new();
            client.read_to_end(&mut raw).unwrap();
            let body_start = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let resp = read_response(&mut std::io::Cursor::new(&raw[..]), false).unwrap();
            assert_eq!(
                resp.body.len(),
                BIG + 3,
                "{server} {key}: {}",
                raw.len() - body_start
            );
            assert!(resp.body.ends_with(b"xxend"), "{server} {key}");
            assert_eq!(seen(key), "1 nil", "{server} {key}");
        }
    }
}

#[test]
fn flushed_output_reaches_an_http2_client_while_the_script_waits() {
    use std::io::Read;
    let (scripts, names) = stream_scripts(&[]);
    let yaml = weir_lua_cases(&scripts, &names, 1, "  shared_dicts: { d: 1MiB }\n").replace(
        "address: \"127.0.0.1:0\" }",
        "address: \"127.0.0.1:0\", h2c: true }",
    );
    let weir = Weir::start(&yaml);
    let mut curl = std::process::Command::new("curl")
        .args(["-sN", "-i", "--http2-prior-knowledge"])
        .arg(format!("http://{}/case/stream", weir.addr()))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl");
    let mut out = curl.stdout.take().unwrap();
    let mut got = Vec::new();
    read_until(&mut out, &mut got, "first\n");
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/2 200"), "{text}");
    assert!(text.contains("x-stream: yes"), "{text}");
    assert!(!text.contains("second"), "{text}");
    assert_eq!(get(weir.addr(), "x", "/case/go").text(), "went\n");
    out.read_to_end(&mut got).unwrap();
    assert!(curl.wait().unwrap().success());
    let text = String::from_utf8_lossy(&got);
    assert!(text.ends_with("\r\n\r\nfirst\nsecond\n"), "{text}");
}

#[test]
fn a_client_gone_mid_stream_fails_the_next_flush_and_the_worker_serves_on() {
    use std::io::Write;
    // Flushes until one fails, then notes what the failing flush and a later say answered.
    let gone = r#"ngx.shared.d:delete("gone")
ngx.say("first")
ngx.flush(true)
for _ = 1, 3000 do
  ngx.sleep(0.01)
  ngx.print(("x"):rep(1000))
  local ok, err = ngx.flush(true)
  if not ok then
    local said, why = ngx.say("more")
    ngx.shared.d:set("gone", tostring(ok) .. " " .. err .. "|" .. tostring(said) .. " " .. tostring(why))
    return
  end
end"#;
    let seen = r#"ngx.say(ngx.shared.d:get("gone"))"#;
    let (scripts, names) = stream_scripts(&[("gone", gone), ("seen", seen)]);
    let yaml = weir_lua_cases(&scripts, &names, 1, "  shared_dicts: { d: 1MiB }\n").replace(
        "address: \"127.0.0.1:0\" }",
        "address: \"127.0.0.1:0\", h2c: true }",
    );
    let weir = Weir::start(&yaml);
    let nginx = NginxLua::start(&scripts, &names, "lua_shared_dict d 1m;");
    let h2 = |addr: std::net::SocketAddr| {
        let mut curl = std::process::Command::new("curl")
            .args(["-sN", "--http2-prior-knowledge"])
            .arg(format!("http://{addr}/case/gone"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("curl");
        let mut out = curl.stdout.take().unwrap();
        read_until(&mut out, &mut Vec::new(), "first\n");
        let _ = curl.kill();
        let _ = curl.wait();
    };
    let h1 = |addr: std::net::SocketAddr| {
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        client
            .write_all(b"GET /case/gone HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        read_until(&mut client, &mut Vec::new(), "first\n");
    };
    type Leave<'a> = &'a dyn Fn(std::net::SocketAddr);
    let runs: [(&str, std::net::SocketAddr, Leave); 3] = [
        ("nginx", nginx.addr, &h1),
        ("weir", weir.addr(), &h1),
        ("weir over HTTP/2", weir.addr(), &h2),
    ];
    for (server, addr, leave) in runs {
        leave(addr);
        // The script notes the failure once its flush meets the closed connection.
        let waited = Instant::now();
        let noted = loop {
            let noted = get(addr, "x", "/case/seen").text();
            if noted != "nil\n" || waited.elapsed() > Duration::from_secs(20) {
                break noted;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            noted, "nil nginx output filter error|nil nginx output filter error\n",
            "{server}"
        );
        assert_eq!(
            get(addr, "x", "/case/go").text(),
            "went\n",
            "{server} serves on"
        );
    }
}

#[test]
fn a_streamed_answer_goes_through_body_filter_compress_and_the_log_phase() {
    use std::io::{Read, Write};
    let (scripts, _) = stream_scripts(&[]);
    let dir = scripts.display();
    let weir = Weir::start(&format!(
        "server: {{ workers: 1 }}\nentrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         lua:\n  shared_dicts: {{ d: 1MiB }}\nrouters:\n\
         \x20 stream:\n    rule: \"Path(`/stream`)\"\n    middlewares: [gz, lf]\n    lua: {{ content_file: \"{dir}/stream.lua\" }}\n\
         \x20 go:\n    rule: \"Path(`/go`)\"\n    lua: {{ content_file: \"{dir}/go.lua\" }}\n\
         \x20 seen:\n    rule: \"Path(`/seen`)\"\n    lua: {{ content: \"ngx.say(ngx.shared.d:get('logged'))\" }}\n\
         middlewares:\n  gz: {{ compress: {{ algorithms: [gzip] }} }}\n  lf:\n    lua:\n\
         \x20     body_filter: \"if ngx.arg[1] ~= '' then ngx.arg[1] = string.upper(ngx.arg[1]) end\"\n\
         \x20     log: \"ngx.shared.d:set('logged', ngx.var.status .. ' ' .. ngx.var.body_bytes_sent)\"\n"
    ));
    for gzip in [false, true] {
        let mut client = std::net::TcpStream::connect(weir.addr()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let accept = if gzip {
            "Accept-Encoding: gzip\r\n"
        } else {
            ""
        };
        client
            .write_all(
                format!("GET /stream HTTP/1.1\r\nHost: x\r\n{accept}Connection: close\r\n\r\n")
                    .as_bytes(),
            )
            .unwrap();
        // The first piece, filtered (and compressed), before the script goes on.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !body_text(&got, gzip).contains("FIRST\n") {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0, "ended: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        assert!(!body_text(&got, gzip).contains("SECOND"));
        let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        assert_eq!(head.contains("content-encoding: gzip"), gzip, "{head}");
        assert_eq!(get(weir.addr(), "x", "/go").text(), "went\n");
        client.read_to_end(&mut got).unwrap();
        assert_eq!(body_text(&got, gzip), "FIRST\nSECOND\n");
        assert!(got.ends_with(b"\r\n0\r\n\r\n"));
        // The log phase ran once the answer was sent, with what the client got.
        let logged = get(weir.addr(), "x", "/seen").text();
        let bytes = dechunk(&got).len();
        assert_eq!(logged, format!("200 {bytes}\n"), "gzip {gzip}");
    }
}

/// The body of a chunked answer's complete chunks so far (after the head).
fn dechunk(raw: &[u8]) -> Vec<u8> {
    let Some(start) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Vec::new();
    };
    let mut rest = &raw[start + 4..];
    let mut body = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
        if size == 0 || rest.len() < eol + 2 + size + 2 {
            break;
        }
        body.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
        rest = &rest[eol + 2 + size + 2..];
    }
    body
}

/// The text of a chunked answer so far, gunzipped as far as it goes when `gzip`.
fn body_text(raw: &[u8], gzip: bool) -> String {
    use std::io::Write;
    let body = dechunk(raw);
    if !gzip {
        return String::from_utf8_lossy(&body).into_owned();
    }
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let _ = decoder.write_all(&body);
    let _ = decoder.flush();
    String::from_utf8_lossy(decoder.get_ref()).into_owned()
}
