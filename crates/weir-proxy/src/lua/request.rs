//! One request as its script sees it: what was asked (read from the request's head, lent by
//! the run: [`Lending`]), the answer being written, `ngx.ctx` and user variables
//! ([`RequestState`]); the request whose coroutine is running ([`with_request`]), set around
//! each resume by a [`Slice`], with its deadline; a script that waits driven on by
//! [`drive_on`].

use super::watchdog::{monotonic_nanos, Watch};
use crate::http::codec::RequestHead;
use crate::http::local::LocalResponse;
use crate::http::Scheme;
use crate::reply::Reply;
use bytes::Bytes;
use mlua::{Thread, Value};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::marker::PhantomData;
use std::pin::pin;
use std::ptr::NonNull;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

/// What a script has asked and written so far.
#[derive(Default)]
pub(super) struct RequestState {
    /// The request as sent: lent by whoever runs the script ([`Lending`]), or copied for a
    /// state that outlives its head (`body_filter`'s). Its fields are read there when asked,
    /// not copied for every request.
    asked: Asked,
    /// The method, once the script changed it (`ngx.req.set_method`).
    pub method: Option<String>,
    /// The decoded path (`ngx.var.uri`), once changed by `ngx.req.set_uri`.
    pub uri: Option<String>,
    /// The query string without `?` (`ngx.var.args`), once the script changed it.
    pub args: Option<String>,
    /// The request's header fields, copied from the head once the script changes one.
    pub headers: Option<Vec<(String, Vec<u8>)>>,
    /// The client's address, when it is not the lent one (a later phase's, from `carried`).
    pub remote_addr: Option<String>,
    pub scheme: &'static str,
    pub minor_version: u8,
    /// When the script first ran (`ngx.req.start_time`), set by its first [`Slice`]
    /// (`monotonic_nanos`).
    started: Option<u64>,
    /// The request body, read before the script starts (nginx reads it when asked).
    pub body: Option<Bytes>,
    /// `ngx.req.read_body` was called: `get_body_data` answers.
    pub body_read: bool,
    /// `ngx.status`: 0 until set.
    pub status: u16,
    pub response_headers: Vec<(String, String)>,
    pub output: Vec<u8>,
    /// Something was printed: the head is out, as nginx sends it with the first output.
    pub headers_sent: bool,
    /// `ngx.eof` was called: output after it is dropped.
    pub eof: bool,
    /// `ngx.exit`'s status (or `ngx.redirect`'s), once called.
    pub exit: Option<i64>,
    /// Variables the script wrote (`ngx.var.NAME = ...`), made with the first.
    pub vars: Option<HashMap<String, String>>,
    /// `ngx.ctx`, made when first read.
    pub ctx: Option<mlua::Table>,
    /// Request fields the script set or cleared, in order (what a phase hands on).
    pub request_edits: Vec<String>,
    /// Response fields the script set or cleared, in order (`header_filter`'s edits).
    pub response_edits: Vec<String>,
    /// The request's key among those whose phases share state (`carried.rs`).
    pub key: usize,
    /// `ngx.exec`'s target: the path (with its escapes) and the query.
    pub exec: Option<(String, String)>,
    /// The request has a body a phase may still read (`ngx.req.read_body` then waits for it).
    pub body_pending: bool,
    /// `ngx.req.read_body` waits for the body: the coroutine yielded for it.
    pub wants_body: bool,
    /// `ngx.req.set_body_data` replaced the body: it is what the action gets.
    pub body_set: bool,
    /// In a `body_filter`: the piece of the body it filters (`ngx.arg`).
    pub piece: Option<Box<super::body_filter::BodyPiece>>,
    /// The request phase running (`ngx.get_phase()`): `rewrite`, `access` or `content`.
    pub phase: super::ngx_worker::RequestPhase,
    /// Where a flush (or `ngx.eof`) the script waits for stands (`stream.rs`).
    pub flush: Flush,
    /// That flush is `ngx.flush()` without `true`: the script runs on once its output is
    /// handed to the relay, before it is written.
    pub flush_queues: bool,
    /// The answer streams: its head went out at a flush.
    pub streaming: bool,
    /// The client left a streamed answer: output and flushes fail.
    pub gone: bool,
}

/// What `ngx.flush` does for a run, as lua-nginx-module decides it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Streams {
    /// Nothing (`rewrite`, `access`: weir gathers their output whole): answers 1.
    No,
    /// An answer to HEAD, or one whose status has no body (1xx, 204, 304): `nil, "header
    /// only"`.
    HeaderOnly,
    /// An HTTP/1.0 client, whose answer is gathered to have a length (nginx's
    /// `lua_http10_buffering`): `nil, "buffering"`.
    Buffering,
    /// The output so far goes to the client.
    Yes,
}

impl RequestState {
    /// What flushing does for the running script: only the `content` action's answer (its
    /// phase, in no phase that cannot wait) streams. Found when a script flushes, so that
    /// other requests pay nothing for it.
    pub fn streams(&self) -> Streams {
        let content = matches!(self.phase, super::ngx_worker::RequestPhase::Content);
        if !content || super::cosocket::disabled_in().is_some() {
            Streams::No
        } else if self.method() == "HEAD" || matches!(self.status, 100..=199 | 204 | 304) {
            // No body follows such a head: nginx marks the request `header_only` as it sends it.
            Streams::HeaderOnly
        } else if self.minor_version == 0 {
            Streams::Buffering
        } else {
            Streams::Yes
        }
    }
}

/// A flush the script waits for: asked (its Lua half yielded), its output handed to the
/// relay, then written (the relay asked for more), when the script goes on.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flush {
    #[default]
    None,
    Asked,
    Handed,
    Done,
}

/// Where a state reads the request as sent.
#[derive(Default)]
enum Asked {
    /// Nowhere any more: the run that was lent it has ended.
    #[default]
    Gone,
    /// The head and client address a [`Lending`] holds borrowed.
    Lent(NonNull<RequestHead>, NonNull<str>),
    /// A copy, with the client's address.
    Copied(Box<RequestHead>, String),
}

/// A request's state that reads its request from the head (and client address) the caller
/// holds borrowed for as long as this lives; the state forgets them when it is dropped or
/// released, so that the head may change after.
pub(super) struct Lending<'h> {
    state: Rc<RefCell<RequestState>>,
    _head: PhantomData<&'h RequestHead>,
}

impl<'h> Lending<'h> {
    pub fn state(&self) -> &Rc<RefCell<RequestState>> {
        &self.state
    }

    /// The state, the request no longer lent to it (in place: it is large to move).
    pub fn release(self) -> Rc<RefCell<RequestState>> {
        // Dropping `self` forgets the request.
        self.state.clone()
    }
}

impl<'h> Lending<'h> {
    /// The state with its own copy of the request, for a script that runs on after the
    /// head is gone (a streamed answer's).
    pub fn keep(self) -> Rc<RefCell<RequestState>> {
        {
            let mut state = self.state.borrow_mut();
            let copied = state
                .asked()
                .map(|(head, addr)| (Box::new(head.clone()), addr.to_string()));
            if let Some((head, addr)) = copied {
                state.asked = Asked::Copied(head, addr);
            }
        }
        self.state.clone()
    }
}

impl Drop for Lending<'_> {
    fn drop(&mut self) {
        // The state's only other holder is the running slice's, gone by now: it is not
        // borrowed. Were it, the state would keep pointers to a head about to go away, and a
        // later read would be a use after free: stopping is the only safe way out.
        match self.state.try_borrow_mut() {
            Ok(mut state) if matches!(state.asked, Asked::Lent(..)) => state.asked = Asked::Gone,
            Ok(_) => {}
            Err(_) => {
                crate::log_error!("lua: a request's state was borrowed as its run ended");
                std::process::abort();
            }
        }
    }
}

impl RequestState {
    /// The state of a run on the request `head` from `remote_addr`, which it reads there.
    pub fn lent<'h>(
        head: &'h RequestHead,
        remote_addr: &'h str,
        scheme: Scheme,
        body: Option<Bytes>,
    ) -> Lending<'h> {
        let state = RequestState {
            asked: Asked::Lent(NonNull::from(head), NonNull::from(remote_addr)),
            ..RequestState::with_head(head, scheme, body)
        };
        Lending {
            state: Rc::new(RefCell::new(state)),
            _head: PhantomData,
        }
    }

    /// The state of a run that outlives the head (`body_filter`'s): the request is copied.
    pub fn copied(head: &RequestHead, remote_addr: String, scheme: Scheme) -> RequestState {
        RequestState {
            asked: Asked::Copied(Box::new(head.clone()), remote_addr),
            ..RequestState::with_head(head, scheme, None)
        }
    }

    fn with_head(head: &RequestHead, scheme: Scheme, body: Option<Bytes>) -> RequestState {
        RequestState {
            scheme: scheme.as_str(),
            minor_version: head.minor_version,
            body,
            key: super::carried::key(head),
            ..RequestState::default()
        }
    }

    /// The request as sent, and the client's address: `None` once the run that was lent them
    /// ended.
    #[allow(unsafe_code)]
    fn asked(&self) -> Option<(&RequestHead, &str)> {
        match &self.asked {
            Asked::Gone => None,
            // SAFETY: the `Lending` that set these holds both borrowed for `'h`, and sets
            // `Gone` when it is dropped or released; until then the head is only read.
            Asked::Lent(head, addr) => unsafe { Some((head.as_ref(), addr.as_ref())) },
            Asked::Copied(head, addr) => Some((head, addr)),
        }
    }

    pub fn method(&self) -> &str {
        match (&self.method, self.asked()) {
            (Some(method), _) => method,
            (None, Some((head, _))) => head.method(),
            (None, None) => "",
        }
    }

    /// The decoded path (`ngx.var.uri`).
    pub fn uri(&self) -> String {
        match (&self.uri, self.asked()) {
            (Some(uri), _) => uri.clone(),
            (None, Some((head, _))) => decoded_path(head),
            (None, None) => String::new(),
        }
    }

    /// The target as the client sent it (`ngx.var.request_uri`).
    pub fn request_uri(&self) -> &str {
        self.asked().map_or("", |(head, _)| head.target())
    }

    /// The query string without `?` (`ngx.var.args`).
    pub fn args(&self) -> &str {
        match (&self.args, self.asked()) {
            (Some(args), _) => args,
            (None, Some((head, _))) => head.query(),
            (None, None) => "",
        }
    }

    pub fn remote_addr(&self) -> &str {
        match (&self.remote_addr, self.asked()) {
            (Some(addr), _) => addr,
            (None, Some((_, addr))) => addr,
            (None, None) => "",
        }
    }

    /// `ngx.req.start_time`: when the script first ran, in seconds since the epoch.
    pub fn start_time(&self) -> f64 {
        let now = super::ngx_util::now_seconds();
        let ago = |at: u64| monotonic_nanos().saturating_sub(at) as f64 / 1e9;
        self.started.map_or(now, |at| now - ago(at))
    }

    /// The request's header fields, as sent or as the script left them.
    pub fn header_list(&self) -> Vec<(String, Vec<u8>)> {
        match (&self.headers, self.asked()) {
            (Some(headers), _) => headers.clone(),
            (None, Some((head, _))) => copy_headers(head),
            (None, None) => Vec::new(),
        }
    }

    /// The header fields, for the script to change: copied from the head first.
    pub fn headers_mut(&mut self) -> &mut Vec<(String, Vec<u8>)> {
        if self.headers.is_none() {
            self.headers = Some(
                self.asked()
                    .map(|(h, _)| copy_headers(h))
                    .unwrap_or_default(),
            );
        }
        self.headers.get_or_insert_with(Vec::new)
    }

    /// The first request header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        match (&self.headers, self.asked()) {
            (Some(headers), _) => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_slice()),
            (None, Some((head, _))) => head.head.get(name),
            (None, None) => None,
        }
    }

    /// A request phase's answer, if it ends the request: its output, or `ngx.exit` with a
    /// status of 200 or more (`ngx.OK` and `ngx.DECLINED` go on to the next phase).
    pub fn phase_answer(&mut self) -> Option<crate::http::local::LocalResponse> {
        let exit = self.exit.unwrap_or(0);
        if !(self.headers_sent || exit >= 200 || exit == -1 || self.exec.is_some()) {
            return None;
        }
        Some(match self.take_reply().head {
            crate::reply::ReplyHead::Local(answer) => answer.into_owned(),
            crate::reply::ReplyHead::Error(error) => error.into_plain().into_owned(),
            // The script's answers are local or errors.
            _ => crate::http::local::LocalResponse::new(500, Vec::new(), ""),
        })
    }

    /// The answer: what the script wrote, or the error page for an `ngx.exit` status of 300
    /// or more with nothing written (as nginx sends its special response).
    pub fn take_reply(&mut self) -> Reply<'static> {
        self.take_reply_as(None)
    }

    /// [`Self::take_reply`] for a `content` script whose last answer was `last`: an answer
    /// the same as that one (a script answering every request alike) is it again, shared,
    /// not built anew; a new one small enough to compare cheaply is kept as the next `last`.
    pub fn take_reply_as(
        &mut self,
        last: Option<&mut Option<Rc<LocalResponse>>>,
    ) -> Reply<'static> {
        if let Some((path, query)) = self.exec.take() {
            // Its stand-in: the exchange routes the request again and answers from there.
            let body = self.body.take();
            let exec = super::carried::Exec { path, query, body };
            super::carried::set_exec(self.key, exec);
            return super::answer(200, Vec::new(), Vec::new());
        }
        let exit = self.exit.unwrap_or(0);
        if !self.headers_sent && (exit >= 300 || exit == -1) {
            let status = if exit == -1 { 500 } else { exit as u16 };
            if (301..=308).contains(&status) {
                let location = self
                    .response_headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("location"));
                if let Some((_, to)) = location {
                    let redirect = crate::http::local::LocalResponse::redirect(status, to);
                    return Reply::local(std::borrow::Cow::Owned(redirect));
                }
            }
            let reason = crate::http::codec::reason(status);
            return Reply::error(crate::http::error::LocalError::new(
                status,
                crate::http::error::ErrorKind::Script,
                reason,
            ));
        }
        let status = match (self.status, exit) {
            (0, 200..=299) => exit as u16,
            (0, _) => 200,
            (status, _) => status,
        };
        let mut headers = std::mem::take(&mut self.response_headers);
        if status == 204 {
            // As nginx's header filter makes a 204: no type, no Last-Modified (the body goes
            // in LocalResponse::new).
            headers.retain(|(n, _)| {
                !n.eq_ignore_ascii_case("content-type") && !n.eq_ignore_ascii_case("last-modified")
            });
        }
        // nginx's `default_type` as Debian's and weir's tests configure it.
        let typed = status == 204
            || headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
        // Only a success: the drivers treat some error statuses of a local answer apart.
        let kept = (200..300).contains(&status) && self.output.len() <= MAX_KEPT_BODY;
        let last = last.filter(|_| kept);
        if let Some(same) = last.as_ref().and_then(|last| last.as_ref()) {
            if same_answer(same, status, !typed, &headers, &self.output) {
                return Reply::shared(same.clone());
            }
        }
        if !typed {
            headers.insert(0, (DEFAULT_TYPE.0.to_string(), DEFAULT_TYPE.1.to_string()));
        }
        let answer = LocalResponse::new(status, headers, std::mem::take(&mut self.output));
        let Some(last) = last else {
            return Reply::local(std::borrow::Cow::Owned(answer));
        };
        let answer = Rc::new(answer);
        *last = Some(answer.clone());
        Reply::shared(answer)
    }
}

/// The largest body of an answer kept to compare the next with: comparing costs little, and
/// a kept answer's memory stays with the worker.
const MAX_KEPT_BODY: usize = 4096;

/// The Content-Type of an answer whose script set none (nginx's `default_type`).
pub(super) const DEFAULT_TYPE: (&str, &str) = ("Content-Type", "text/plain");

/// Whether `last` is the answer `status`, `headers` (after the default Content-Type when
/// `defaulted`) and `body` would make.
fn same_answer(
    last: &LocalResponse,
    status: u16,
    defaulted: bool,
    headers: &[(String, String)],
    body: &[u8],
) -> bool {
    if last.status != status || last.body != body {
        return false;
    }
    let mut theirs = last.headers.iter();
    if defaulted {
        match theirs.next() {
            Some((name, value)) if (name.as_str(), value.as_str()) == DEFAULT_TYPE => {}
            _ => return false,
        }
    }
    theirs.eq(headers.iter())
}

/// A request's path decoded, as `ngx.var.uri` gives it.
pub(super) fn decoded_path(head: &RequestHead) -> String {
    let path = super::ngx_util::unescape(head.path().as_bytes(), false);
    match String::from_utf8(path) {
        Ok(path) => path,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// A head's header fields, copied.
fn copy_headers(head: &RequestHead) -> Vec<(String, Vec<u8>)> {
    head.head
        .iter()
        .map(|(name, value)| (String::from_utf8_lossy(name).into_owned(), value.to_vec()))
        .collect()
}

thread_local! {
    /// The request whose script is running on this worker thread.
    static CURRENT: RefCell<Option<Rc<RefCell<RequestState>>>> = const { RefCell::new(None) };
    /// When the running script must have yielded by (`monotonic_nanos`), 0 when none runs.
    static DEADLINE: Cell<u64> = const { Cell::new(0) };
}

/// When the running script must yield by (`monotonic_nanos`), if one runs.
pub(super) fn deadline() -> Option<u64> {
    Some(DEADLINE.get()).filter(|&d| d != 0)
}

/// `f` on the request whose script is running; an error for code run outside a request
/// (`init`).
pub(super) fn with_request<R>(f: impl FnOnce(&mut RequestState) -> R) -> mlua::Result<R> {
    CURRENT.with_borrow(|current| match current {
        Some(state) => Ok(f(&mut state.borrow_mut())),
        None => Err(mlua::Error::runtime(
            "this API is not available outside a request (init, init_worker)",
        )),
    })
}

/// One run of Lua between yields: its request is the current one and its deadline armed,
/// until dropped.
pub(super) struct Slice<'vm> {
    previous: Option<Rc<RefCell<RequestState>>>,
    previous_deadline: u64,
    watch: &'vm Watch,
}

impl Slice<'_> {
    pub fn start(
        state: Option<Rc<RefCell<RequestState>>>,
        max_run_time: Duration,
        watch: &Watch,
    ) -> Slice<'_> {
        let now = monotonic_nanos();
        if let Some(mut state) = state.as_ref().and_then(|s| s.try_borrow_mut().ok()) {
            state.started.get_or_insert(now);
        }
        let previous = CURRENT.with_borrow_mut(|current| std::mem::replace(current, state));
        let run_time = u64::try_from(max_run_time.as_nanos()).unwrap_or(u64::MAX);
        let deadline = now.saturating_add(run_time);
        let previous_deadline = DEADLINE.replace(deadline);
        watch.set_deadline(deadline);
        Slice {
            previous,
            previous_deadline,
            watch,
        }
    }
}

impl Drop for Slice<'_> {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with_borrow_mut(|current| *current = previous);
        DEADLINE.set(self.previous_deadline);
        self.watch.set_deadline(self.previous_deadline);
    }
}

/// Reads the request's body for a phase that asks for it: the body, or the status that
/// answers instead (413 past the limit, 400 for a broken body).
pub trait ReadBody {
    fn read_body<'a>(
        &'a mut self,
        head: &'a RequestHead,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Bytes, u16>> + 'a>>;
}

/// What reads a phase's request body, and the request it reads it for.
pub(super) type BodyRead<'a> = (&'a RequestHead, &'a mut dyn ReadBody);

/// Runs on a script that yielded in `thread` on its first resume ([`super::vm`]'s `start`) to
/// its end, `ngx.exit` or an error, resuming it whenever what it waits for (`ngx.sleep`) is
/// ready; for a phase that may read the request's body, when the script waits for it
/// (`ngx.req.read_body` yielded), `reader` reads it and the script goes on with it.
/// Stops at a flush the script waits for ([`Stop::Flushing`]).
pub(super) async fn drive_on(
    thread: &Thread,
    state: &Rc<RefCell<RequestState>>,
    max_run_time: Duration,
    watch: &Watch,
    mut reader: Option<BodyRead<'_>>,
) -> mlua::Result<Stop> {
    // `ngx.exit` yields to end the script.
    if state.borrow().exit.is_some() {
        return Ok(Stop::Stopped);
    }
    let mut reading = None;
    if state.borrow().wants_body {
        match reader.take() {
            Some((head, reader)) => reading = Some(reader.read_body(head)),
            None => state.borrow_mut().wants_body = false,
        }
    }
    let mut run = pin!(thread.clone().into_async::<Value>(()));
    poll_fn(|cx| loop {
        // The body first, outside the script's slice: reading it is not running Lua.
        if let Some(read) = &mut reading {
            let read: &mut std::pin::Pin<Box<dyn std::future::Future<Output = _>>> = read;
            let Poll::Ready(body) = read.as_mut().poll(cx) else {
                return Poll::Pending;
            };
            reading = None;
            let mut state = state.borrow_mut();
            state.wants_body = false;
            state.body_pending = false;
            match body {
                Ok(body) => {
                    state.body = Some(body);
                    state.body_read = true;
                }
                Err(status) => {
                    state.exit = Some(i64::from(status));
                    return Poll::Ready(Ok(Stop::Stopped));
                }
            }
        }
        let _slice = Slice::start(Some(state.clone()), max_run_time, watch);
        let _resuming = super::cosocket::Resuming::enter(cx.waker());
        match poll_next(run.as_mut(), cx) {
            // A flush waits for its output to be written: the caller sends it.
            Poll::Pending if state.borrow().flush == Flush::Asked => {
                return Poll::Ready(Ok(Stop::Flushing))
            }
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(Ok(Stop::Stopped)),
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
            Poll::Ready(Some(Ok(value))) if super::vm::ended(&value) => {
                return Poll::Ready(Ok(Stop::Ended))
            }
            // `ngx.exit` yields to end the script; any other yield is resumed.
            Poll::Ready(Some(Ok(_))) if state.borrow().exit.is_some() => {
                return Poll::Ready(Ok(Stop::Stopped))
            }
            Poll::Ready(Some(Ok(_))) if state.borrow().wants_body => match reader.take() {
                Some((head, reader)) => reading = Some(reader.read_body(head)),
                None => state.borrow_mut().wants_body = false,
            },
            Poll::Ready(Some(Ok(_))) => {}
        }
    })
    .await
}

/// Where a script's run stopped.
pub(super) enum Stop {
    /// It ended, and its coroutine waits for another script (`vm::ended`).
    Ended,
    /// `ngx.exit`, or a body that could not be read: its coroutine is not resumed.
    Stopped,
    /// It waits for its output to be written (`ngx.flush`, `ngx.eof`).
    Flushing,
}

/// `Stream::poll_next` of the coroutine: each yield or its end.
fn poll_next<S: futures_core::Stream + ?Sized>(
    run: std::pin::Pin<&mut S>,
    cx: &mut std::task::Context<'_>,
) -> Poll<Option<S::Item>> {
    run.poll_next(cx)
}
