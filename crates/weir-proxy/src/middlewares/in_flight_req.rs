//! `in_flight_req`: at most `amount` requests in progress at once per source, counted for the
//! whole instance (Traefik's inFlightReq, on oxy's connlimit); one more is refused 429 with
//! `max connections reached: AMOUNT`. A request counts until its exchange ends, answer sent.

use super::source::{self, Shards};
use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use weir_config::SourceCriterion;

type Counts = HashMap<Box<[u8]>, u64, foldhash::fast::FixedState>;

/// An `in_flight_req` middleware, built once per configuration and shared by the workers.
pub struct InFlightReq {
    amount: u64,
    criterion: SourceCriterion,
    /// Requests in progress by source; a source with none has no entry.
    in_progress: Arc<Shards<Counts>>,
    refusal: LocalError,
}

impl std::fmt::Debug for InFlightReq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightReq")
            .field("amount", &self.amount)
            .finish_non_exhaustive()
    }
}

/// One request in progress: counted until dropped, with its exchange.
pub struct InFlight {
    in_progress: Arc<Shards<Counts>>,
    source: Box<[u8]>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut counts = self.in_progress.lock(&self.source);
        if let Some(count) = counts.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.source);
            }
        }
    }
}

impl InFlightReq {
    pub fn new(config: &weir_config::InFlightReq) -> InFlightReq {
        let message = format!("max connections reached: {}", config.amount);
        InFlightReq {
            amount: config.amount,
            criterion: config.source_criterion.clone(),
            in_progress: Arc::new(Shards::new()),
            refusal: LocalError::new(429, ErrorKind::PolicyRefused, message),
        }
    }

    /// Counts `req` in its source's requests in progress, or refuses it when there are
    /// `amount` already.
    pub(super) fn on_request(
        &self,
        req: &RequestHead,
        peer: IpAddr,
    ) -> Result<InFlight, LocalError> {
        let mut spelled = [0u8; 45];
        let source = source::source_key(&self.criterion, req, peer).as_key(&mut spelled);
        let mut counts = self.in_progress.lock(source);
        match counts.get_mut(source) {
            Some(count) if *count >= self.amount => return Err(self.refusal.clone()),
            Some(count) => *count += 1,
            None => {
                counts.insert(source.into(), 1);
            }
        }
        drop(counts);
        Ok(InFlight {
            in_progress: self.in_progress.clone(),
            source: source.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::codec::parse_request;
    use bytes::BytesMut;

    fn request(host: &str) -> RequestHead {
        let text = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        parse_request(&mut BytesMut::from(text.as_str()))
            .expect("valid")
            .expect("whole")
    }

    /// oxy's connlimit as Traefik uses it: `amount` at once per source (the host by default),
    /// the next refused with `max connections reached: N`; an ended request frees its place,
    /// and a source with nothing in progress keeps no entry.
    #[test]
    fn counts_requests_in_progress_by_source() {
        let limit = InFlightReq::new(&weir_config::InFlightReq {
            amount: 2,
            source_criterion: SourceCriterion::RequestHost,
        });
        let peer = "192.0.2.1".parse().unwrap();
        let (a, b) = (request("a.test"), request("b.test"));
        let first = limit.on_request(&a, peer).expect("first");
        let second = limit.on_request(&a, peer).expect("second");
        let Err(refused) = limit.on_request(&a, peer) else {
            panic!("a third request at once is let through");
        };
        assert_eq!(refused.status, 429);
        assert_eq!(refused.message, "max connections reached: 2");
        let other = limit.on_request(&b, peer).expect("another host");
        drop(first);
        let again = limit.on_request(&a, peer).expect("a place was freed");
        drop((second, again, other));
        let kept: usize = limit.in_progress.each().map(|s| s.len()).sum();
        assert_eq!(kept, 0);
    }
}
