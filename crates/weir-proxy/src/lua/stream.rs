//! A `content` script's answer streamed (`ngx.flush`, `ngx.eof`): at the script's first flush
//! its head goes out, and the rest of the script runs as the relay pulls the body
//! ([`LuaStream`], a `ReplyBody::Produced`), in the request's task.

use super::request::{Flush, RequestState, Stop, DEFAULT_TYPE};
use super::vm::WorkerVm;
use crate::http::codec::{Framing, ResponseHead};
use crate::reply::{BodyProducer, Reply, ReplyBody, ReplyHead};
use bytes::Bytes;
use mlua::Thread;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

type Run = Pin<Box<dyn Future<Output = (Thread, mlua::Result<Stop>)>>>;

/// The script behind a streamed answer, resumed each time the relay asks for more.
struct LuaStream {
    vm: Rc<WorkerVm>,
    state: Rc<RefCell<RequestState>>,
    /// The script's coroutine while it waits for a flush.
    thread: Option<Thread>,
    /// The script running on to its next stop.
    run: Option<Run>,
    /// The script ended (or failed): nothing more to resume.
    finished: bool,
    /// The router's name, for an error's log line.
    name: String,
}

/// The answer of a script that waits in its first flush in `thread`: its head as the script
/// left it, and its body the rest of the script's output. `ngx.eof` before any flush makes
/// the body known whole, so it keeps a `Content-Length`; else its length is unknown (chunked
/// to HTTP/1.1 clients).
pub(super) fn streamed(
    vm: Rc<WorkerVm>,
    thread: Thread,
    state: Rc<RefCell<RequestState>>,
    name: &str,
) -> Reply<'static> {
    let (status, mut headers, framing) = {
        let mut s = state.borrow_mut();
        s.streaming = true;
        let status = if s.status == 0 { 200 } else { s.status };
        let framing = match s.eof {
            true => Framing::Length(s.output.len() as u64),
            false => Framing::Chunked,
        };
        (status, std::mem::take(&mut s.response_headers), framing)
    };
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        headers.insert(0, (DEFAULT_TYPE.0.to_string(), DEFAULT_TYPE.1.to_string()));
    }
    let fields = headers
        .iter()
        .map(|(name, value)| (name.as_bytes(), value.as_bytes()));
    let mut head = ResponseHead::from_fields(status, fields, framing);
    // The worker's `Date`, as for weir's other own answers.
    head.has_date = false;
    let stream = LuaStream {
        vm,
        state,
        thread: Some(thread),
        run: None,
        finished: false,
        name: name.to_string(),
    };
    Reply {
        head: ReplyHead::Response(head),
        body: ReplyBody::Produced(Box::new(stream)),
        upstream: None,
        body_filter: None,
    }
}

impl LuaStream {
    /// Drives the script on to its next stop: `Ready(false)` when it failed (logged).
    fn poll_script(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.run.is_none() {
            let Some(thread) = self.thread.take() else {
                self.finished = true;
                return Poll::Ready(true);
            };
            self.run = Some(self.vm.resume_later(thread, self.state.clone()));
        }
        let Some(run) = &mut self.run else {
            return Poll::Ready(true);
        };
        let Poll::Ready((thread, stop)) = run.as_mut().poll(cx) else {
            return Poll::Pending;
        };
        self.run = None;
        match stop {
            Ok(Stop::Flushing) => self.thread = Some(thread),
            Ok(Stop::Ended) => {
                self.vm.keep(thread);
                self.finished = true;
            }
            Ok(Stop::Stopped) => self.finished = true,
            Err(e) => {
                self.finished = true;
                super::log_failure(&self.name, &e.to_string());
                return Poll::Ready(false);
            }
        }
        Poll::Ready(true)
    }
}

impl BodyProducer for LuaStream {
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, ()>>> {
        loop {
            {
                let mut s = self.state.borrow_mut();
                // Asked for more: the piece handed before is written.
                if s.flush == Flush::Handed {
                    s.flush = Flush::Done;
                }
                if s.flush == Flush::Asked {
                    s.flush = Flush::Handed;
                    if !s.output.is_empty() {
                        let piece = std::mem::take(&mut s.output);
                        return Poll::Ready(Some(Ok(Bytes::from(piece))));
                    }
                    s.flush = Flush::Done;
                }
                if self.finished && !s.output.is_empty() {
                    let piece = std::mem::take(&mut s.output);
                    return Poll::Ready(Some(Ok(Bytes::from(piece))));
                }
                // `ngx.eof` ends the body; the script goes on in `poll_rest`.
                if self.finished || s.eof {
                    return Poll::Ready(None);
                }
            }
            match self.poll_script(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(true) => {}
                Poll::Ready(false) => return Poll::Ready(Some(Err(()))),
            }
        }
    }

    fn runs_on(&self) -> bool {
        let s = self.state.borrow();
        s.flush == Flush::Handed && s.flush_queues
    }

    fn poll_rest(&mut self, cx: &mut Context<'_>, gone: bool) -> Poll<()> {
        loop {
            {
                let mut s = self.state.borrow_mut();
                if gone {
                    // What it writes from now on fails, and goes nowhere.
                    s.gone = true;
                    s.eof = true;
                }
                s.output.clear();
                if s.flush != Flush::None {
                    s.flush = Flush::Done;
                }
            }
            if self.finished {
                return Poll::Ready(());
            }
            if self.poll_script(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}
