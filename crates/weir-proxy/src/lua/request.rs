//! One request as its script sees it: what was asked, the answer being written, `ngx.ctx`
//! and user variables ([`RequestState`]); the request whose coroutine is running
//! ([`with_request`]), set around each resume by [`drive`], with its deadline.

use super::watchdog::Watch;
use crate::http::codec::RequestHead;
use crate::http::Scheme;
use crate::reply::Reply;
use bytes::Bytes;
use mlua::{Function, MultiValue, Thread};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// What a script has asked and written so far.
#[derive(Default)]
pub(super) struct RequestState {
    pub method: String,
    /// The decoded path (`ngx.var.uri`), changed by `ngx.req.set_uri`.
    pub uri: String,
    /// The target as the client sent it (`ngx.var.request_uri`).
    pub request_uri: String,
    /// The query string without `?` (`ngx.var.args`).
    pub args: String,
    /// The request's header fields, as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    pub remote_addr: String,
    pub scheme: &'static str,
    pub minor_version: u8,
    pub start_time: f64,
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
    /// Variables the script wrote (`ngx.var.NAME = ...`).
    pub vars: HashMap<String, String>,
    /// `ngx.ctx`, made when first read.
    pub ctx: Option<mlua::Table>,
    /// Request fields the script set or cleared, in order (what a phase hands on).
    pub request_edits: Vec<String>,
    /// Response fields the script set or cleared, in order (`header_filter`'s edits).
    pub response_edits: Vec<String>,
}

impl RequestState {
    pub fn new(
        head: &RequestHead,
        remote_addr: &str,
        scheme: Scheme,
        body: Option<Bytes>,
    ) -> RequestState {
        let headers = head
            .head
            .iter()
            .map(|(name, value)| (String::from_utf8_lossy(name).into_owned(), value.to_vec()))
            .collect();
        RequestState {
            method: head.method().to_string(),
            uri: String::from_utf8_lossy(&super::ngx_util::unescape(head.path().as_bytes(), false))
                .into_owned(),
            request_uri: head.target().to_string(),
            args: head.query().to_string(),
            headers,
            remote_addr: remote_addr.to_string(),
            scheme: scheme.as_str(),
            minor_version: head.minor_version,
            start_time: super::ngx_util::now_seconds(),
            body,
            ..RequestState::default()
        }
    }

    /// The first request header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// A request phase's answer, if it ends the request: its output, or `ngx.exit` with a
    /// status of 200 or more (`ngx.OK` and `ngx.DECLINED` go on to the next phase).
    pub fn phase_answer(self) -> Option<crate::http::local::LocalResponse> {
        let exit = self.exit.unwrap_or(0);
        if !(self.headers_sent || exit >= 200 || exit == -1) {
            return None;
        }
        Some(match self.into_reply().head {
            crate::reply::ReplyHead::Local(answer) => answer.into_owned(),
            crate::reply::ReplyHead::Error(error) => error.into_plain().into_owned(),
            // The script's answers are local or errors.
            _ => crate::http::local::LocalResponse::new(500, Vec::new(), ""),
        })
    }

    /// The answer: what the script wrote, or the error page for an `ngx.exit` status of 300
    /// or more with nothing written (as nginx sends its special response).
    pub fn into_reply(mut self) -> Reply<'static> {
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
        if !self
            .response_headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            // nginx's `default_type` as Debian's and weir's tests configure it.
            let default = ("Content-Type".to_string(), "text/plain".to_string());
            self.response_headers.insert(0, default);
        }
        super::answer(status, self.response_headers, self.output)
    }
}

thread_local! {
    /// The request whose script is running on this worker thread.
    static CURRENT: RefCell<Option<Rc<RefCell<RequestState>>>> = const { RefCell::new(None) };
    /// When the running script must have yielded by.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// When the running script must yield by, if one runs.
pub(super) fn deadline() -> Option<Instant> {
    DEADLINE.get()
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
    previous_deadline: Option<Instant>,
    watch: &'vm Watch,
}

impl Slice<'_> {
    pub fn start(
        state: Option<Rc<RefCell<RequestState>>>,
        max_run_time: Duration,
        watch: &Watch,
    ) -> Slice<'_> {
        let previous = CURRENT.with_borrow_mut(|current| std::mem::replace(current, state));
        let deadline = Instant::now() + max_run_time;
        let previous_deadline = DEADLINE.replace(Some(deadline));
        watch.set_deadline(Some(deadline));
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

/// Runs `function` in `thread` to its end, `ngx.exit` or an error, resuming it whenever what
/// it waits for (`ngx.sleep`) is ready.
pub(super) async fn drive(
    thread: Thread,
    function: &Function,
    state: &Rc<RefCell<RequestState>>,
    max_run_time: Duration,
    watch: &Watch,
) -> mlua::Result<()> {
    let mut run = pin!(thread.into_async::<MultiValue>(function));
    poll_fn(|cx| {
        let _slice = Slice::start(Some(state.clone()), max_run_time, watch);
        loop {
            match poll_next(run.as_mut(), cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                // `ngx.exit` yields to end the script; any other yield is resumed.
                Poll::Ready(Some(Ok(_))) if state.borrow().exit.is_some() => {
                    return Poll::Ready(Ok(()))
                }
                Poll::Ready(Some(Ok(_))) => {}
            }
        }
    })
    .await
}

/// `Stream::poll_next` of the coroutine: each yield or its end.
fn poll_next<S: futures_core::Stream + ?Sized>(
    run: std::pin::Pin<&mut S>,
    cx: &mut std::task::Context<'_>,
) -> Poll<Option<S::Item>> {
    run.poll_next(cx)
}
