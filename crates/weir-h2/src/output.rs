//! Bytes waiting for the socket: frames written into a tail buffer, large DATA payloads
//! queued as the caller's `Bytes` between them, so they reach the socket without a copy.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::IoSlice;

/// Payloads shorter than this are copied into the tail: a queue entry costs more than the copy.
const COPY_BELOW: usize = 1024;

#[derive(Default)]
pub(crate) struct Output {
    queue: VecDeque<Bytes>,
    pub tail: BytesMut,
}

impl Output {
    pub fn push_payload(&mut self, payload: Bytes) {
        if payload.len() < COPY_BELOW {
            self.tail.extend_from_slice(&payload);
            return;
        }
        if !self.tail.is_empty() {
            self.queue.push_back(self.tail.split().freeze());
        }
        self.queue.push_back(payload);
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.tail.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.iter().map(Bytes::len).sum::<usize>() + self.tail.len()
    }

    /// Fills `dst` with what is to be written next, in order; returns how many slices.
    pub fn slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for chunk in self
            .queue
            .iter()
            .map(|b| &b[..])
            .chain(std::iter::once(&self.tail[..]))
        {
            if n == dst.len() {
                break;
            }
            if !chunk.is_empty() {
                dst[n] = IoSlice::new(chunk);
                n += 1;
            }
        }
        n
    }

    /// Drops the first `n` bytes, once written.
    pub fn advance(&mut self, mut n: usize) {
        while n > 0 {
            match self.queue.front_mut() {
                Some(front) if front.len() <= n => {
                    n -= front.len();
                    self.queue.pop_front();
                }
                Some(front) => {
                    front.advance(n);
                    return;
                }
                None => {
                    self.tail.advance(n.min(self.tail.len()));
                    return;
                }
            }
        }
    }

    /// Takes everything as one buffer (tests and callers without vectored writes).
    pub fn take(&mut self) -> BytesMut {
        let mut all = BytesMut::with_capacity(self.len());
        for b in self.queue.drain(..) {
            all.extend_from_slice(&b);
        }
        all.extend_from_slice(&self.tail);
        self.tail.clear();
        all
    }

    pub fn heap_bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<Bytes>() + self.tail.capacity()
    }

    pub fn release(&mut self) {
        self.queue = VecDeque::new();
        self.tail = BytesMut::new();
    }
}
