//! Spans as weir describes them (`SpanKind`, `SpanRecord`) and writes them: each span written
//! once, by the worker that served it, straight into protobuf (`SpanWriter`, into a worker's
//! `SpanBytes`), and a batch of written spans framed as one OTLP `ExportTraceServiceRequest`
//! (`opentelemetry/proto/collector/trace/v1`, field numbers as in the opentelemetry-proto
//! repository). The prost messages below read that encoding back in the tests.

use crate::http::trace_context::{AttrValue, Attributes, SpanEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Server,
    Client,
}

/// Finished spans, each the bytes of one `ScopeSpans.spans` field written by the worker
/// that served it (`otlp::SpanWriter`), one after the other: the exporter only concatenates
/// them. A worker fills one and hands it over whole.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SpanBytes {
    pub bytes: Vec<u8>,
    pub spans: usize,
}

/// A finished span described field by field (a TCP connection's; `otlp::encode_record`
/// writes it).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub trace_id: u128,
    pub span_id: u64,
    /// 0: a root span.
    pub parent_id: u64,
    pub tracestate: Option<Box<[u8]>>,
    pub name: String,
    pub kind: SpanKind,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Attributes,
    pub events: Vec<SpanEvent>,
    /// The span's status is Error (a server span's 5xx, a client span's failure or 4xx/5xx).
    pub error: bool,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportTraceServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_spans: Vec<ScopeSpans>,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeSpans {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub spans: Vec<Span>,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct Span {
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
    #[prost(string, tag = "3")]
    pub trace_state: String,
    #[prost(bytes = "vec", tag = "4")]
    pub parent_span_id: Vec<u8>,
    #[prost(string, tag = "5")]
    pub name: String,
    /// 2: server, 3: client.
    #[prost(int32, tag = "6")]
    pub kind: i32,
    #[prost(fixed64, tag = "7")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    pub end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
    #[prost(message, optional, tag = "15")]
    pub status: Option<Status>,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(fixed64, tag = "1")]
    pub time_unix_nano: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<KeyValue>,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(string, tag = "2")]
    pub message: String,
    /// 0: unset, 2: error.
    #[prost(int32, tag = "3")]
    pub code: i32,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(oneof = "any_value::Value", tags = "1, 2, 3")]
    pub value: Option<any_value::Value>,
}

#[cfg(test)]
pub mod any_value {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(string, tag = "1")]
        Str(String),
        #[prost(bool, tag = "2")]
        Bool(bool),
        #[prost(int64, tag = "3")]
        Int(i64),
    }
}

/// What the exported resource says of this process.
pub struct ResourceInfo<'a> {
    pub service_name: &'a str,
    pub attributes: &'a [(String, String)],
}

/// `spans` as one export request's protobuf bytes, each span's bytes copied once: the
/// nested messages' lengths are known before they are written.
pub fn encode(resource: &ResourceInfo<'_>, spans: &[SpanBytes]) -> Vec<u8> {
    let mut scope = Vec::with_capacity(32);
    put_str(&mut scope, 1, "weir");
    put_str(&mut scope, 2, env!("CARGO_PKG_VERSION"));
    let mut attributes = Vec::with_capacity(128);
    put_key_value(
        &mut attributes,
        1,
        "service.name",
        &Value::Str(resource.service_name),
    );
    for (key, value) in resource.attributes {
        put_key_value(&mut attributes, 1, key, &Value::Str(value));
    }
    let spans_len: usize = spans.iter().map(|s| s.bytes.len()).sum();
    let nested = |len: usize| 1 + varint_len(len as u64) + len;
    // ScopeSpans: the scope (1), then the spans (2) as the workers wrote them.
    let scope_spans_len = nested(scope.len()) + spans_len;
    // ResourceSpans: the resource (1), then the scope's spans (2).
    let resource_spans_len = nested(attributes.len()) + nested(scope_spans_len);
    let mut out = Vec::with_capacity(nested(resource_spans_len));
    key(&mut out, 1, LENGTH_DELIMITED);
    varint(&mut out, resource_spans_len as u64);
    put_message(&mut out, 1, &attributes);
    key(&mut out, 2, LENGTH_DELIMITED);
    varint(&mut out, scope_spans_len as u64);
    put_message(&mut out, 1, &scope);
    for group in spans {
        out.extend_from_slice(&group.bytes);
    }
    out
}

/// A span written in protobuf as it is described, into its worker's pending spans: its
/// attributes go straight from the request into the bytes the exporter sends, with no record
/// of copied strings in between (that record, its drop and its encoding on the exporter cost
/// a traced request 5,000 instructions more, callgrind).
pub struct SpanWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Where this span's field begins in `out`.
    at: usize,
}

/// Who a span is: its trace, its own id and its parent's (0: a root span), and the trace
/// state it carries.
pub struct SpanIds<'a> {
    pub trace_id: u128,
    pub span_id: u64,
    pub parent_id: u64,
    pub tracestate: Option<&'a [u8]>,
}

impl<'a> SpanWriter<'a> {
    pub fn begin(
        out: &'a mut Vec<u8>,
        ids: SpanIds<'_>,
        kind: SpanKind,
        start_unix_nano: u64,
    ) -> SpanWriter<'a> {
        let at = out.len();
        out.reserve(768);
        // `ScopeSpans.spans` (2), with two bytes kept for its length (`finish`).
        out.extend_from_slice(&[2 << 3 | LENGTH_DELIMITED as u8, 0, 0]);
        put_bytes(out, 1, &ids.trace_id.to_be_bytes());
        put_bytes(out, 2, &ids.span_id.to_be_bytes());
        if let Some(state) = ids.tracestate {
            put_bytes(out, 3, state);
        }
        if ids.parent_id != 0 {
            put_bytes(out, 4, &ids.parent_id.to_be_bytes());
        }
        let kind = match kind {
            SpanKind::Server => 2,
            SpanKind::Client => 3,
        };
        out.extend_from_slice(&[6 << 3 | VARINT as u8, kind]);
        put_fixed64(out, 7, start_unix_nano);
        SpanWriter { out, at }
    }

    /// The span's name, the concatenation of `parts`.
    pub fn name(&mut self, parts: &[&str]) {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        key(self.out, 5, LENGTH_DELIMITED);
        varint(self.out, len as u64);
        for part in parts {
            self.out.extend_from_slice(part.as_bytes());
        }
    }

    #[inline(always)]
    pub fn str(&mut self, name: &str, value: &str) {
        put_key_value(self.out, 9, name, &Value::Str(value));
    }

    /// A string attribute that is the concatenation of `parts`.
    #[inline(always)]
    pub fn str_parts(&mut self, name: &str, parts: &[&str]) {
        put_key_value(self.out, 9, name, &Value::Parts(parts));
    }

    #[inline(always)]
    pub fn int(&mut self, name: &str, value: i64) {
        put_key_value(self.out, 9, name, &Value::Int(value));
    }

    #[inline(always)]
    pub fn bool(&mut self, name: &str, value: bool) {
        put_key_value(self.out, 9, name, &Value::Bool(value));
    }

    pub fn attributes(&mut self, attributes: &Attributes) {
        put_attributes(self.out, 9, attributes);
    }

    pub fn events(&mut self, events: &[SpanEvent]) {
        for event in events {
            let mut body = Vec::with_capacity(128);
            put_fixed64(&mut body, 1, event.time_unix_nano);
            put_str(&mut body, 2, event.name);
            put_attributes(&mut body, 3, &event.attributes);
            put_message(self.out, 11, &body);
        }
    }

    /// The span ended at `end_unix_nano`, its status Error when `error`.
    pub fn finish(self, end_unix_nano: u64, error: bool) {
        put_fixed64(self.out, 8, end_unix_nano);
        if error {
            // Status { code: STATUS_CODE_ERROR }.
            put_message(self.out, 15, &[3 << 3, 2]);
        }
        // The two bytes kept fit the length unless the span is shorter than 128 bytes or
        // longer than 16 KiB (then the body moves).
        let at = self.at;
        let len = self.out.len() - at - 3;
        if (128..16384).contains(&len) {
            self.out[at + 1] = (len as u8 & 0x7f) | 0x80;
            self.out[at + 2] = (len >> 7) as u8;
        } else {
            let mut prefix = Vec::with_capacity(3);
            varint(&mut prefix, len as u64);
            self.out.splice(at + 1..at + 3, prefix);
        }
    }
}

/// A span described as a record (TCP connections', and the tests'), written as a worker's is.
pub fn write_record(out: &mut Vec<u8>, span: &SpanRecord) {
    let ids = SpanIds {
        trace_id: span.trace_id,
        span_id: span.span_id,
        parent_id: span.parent_id,
        tracestate: span.tracestate.as_deref(),
    };
    let mut writer = SpanWriter::begin(out, ids, span.kind, span.start_unix_nano);
    writer.name(&[&span.name]);
    writer.attributes(&span.attributes);
    writer.events(&span.events);
    writer.finish(span.end_unix_nano, span.error);
}

/// An attribute value borrowed for encoding.
enum Value<'a> {
    Str(&'a str),
    /// A string in pieces, written one after the other.
    Parts(&'a [&'a str]),
    Int(i64),
    Bool(bool),
}

fn put_attributes(out: &mut Vec<u8>, tag: u32, attributes: &Attributes) {
    for (key, value) in attributes {
        let value = match value {
            AttrValue::Str(s) => Value::Str(s),
            AttrValue::Static(s) => Value::Str(s),
            AttrValue::Int(n) => Value::Int(*n),
            AttrValue::Bool(b) => Value::Bool(*b),
        };
        put_key_value(out, tag, key, &value);
    }
}

/// A `KeyValue` (key 1, `AnyValue` 2: string 1, bool 2, int 3) as field `tag`. Inlined, so
/// that a name known where the span is described (most are) is copied as a constant: the
/// call to copy it cost more than the copy.
#[inline(always)]
fn put_key_value(out: &mut Vec<u8>, tag: u32, name: &str, value: &Value<'_>) {
    let text_len = match value {
        Value::Str(s) => s.len(),
        Value::Parts(parts) => parts.iter().map(|p| p.len()).sum::<usize>(),
        Value::Int(_) | Value::Bool(_) => 0,
    };
    let any_len = match value {
        Value::Str(_) | Value::Parts(_) => 1 + varint_len(text_len as u64) + text_len,
        Value::Int(n) => 1 + varint_len(*n as u64),
        Value::Bool(_) => 2,
    };
    let name_len = 1 + varint_len(name.len() as u64) + name.len();
    let len = name_len + 1 + varint_len(any_len as u64) + any_len;
    out.reserve(len + 12);
    // Nearly every attribute is under 128 bytes: each length is one byte, pushed into the
    // room just reserved (a copy call per piece of framing cost more than the bytes).
    let short = len < 128 && tag < 16;
    if short {
        out.push((tag << 3 | LENGTH_DELIMITED) as u8);
        out.push(len as u8);
        out.push((1 << 3 | LENGTH_DELIMITED) as u8);
        out.push(name.len() as u8);
    } else {
        key(out, tag, LENGTH_DELIMITED);
        varint(out, len as u64);
        key(out, 1, LENGTH_DELIMITED);
        varint(out, name.len() as u64);
    }
    out.extend_from_slice(name.as_bytes());
    if short {
        out.push((2 << 3 | LENGTH_DELIMITED) as u8);
        out.push(any_len as u8);
    } else {
        key(out, 2, LENGTH_DELIMITED);
        varint(out, any_len as u64);
    }
    match value {
        Value::Str(s) => {
            key(out, 1, LENGTH_DELIMITED);
            varint(out, text_len as u64);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Parts(parts) => {
            key(out, 1, LENGTH_DELIMITED);
            varint(out, text_len as u64);
            for part in *parts {
                out.extend_from_slice(part.as_bytes());
            }
        }
        Value::Bool(b) => {
            key(out, 2, VARINT);
            out.push(u8::from(*b));
        }
        Value::Int(n) => {
            key(out, 3, VARINT);
            varint(out, *n as u64);
        }
    }
}

fn put_message(out: &mut Vec<u8>, tag: u32, body: &[u8]) {
    put_bytes(out, tag, body);
}

fn put_str(out: &mut Vec<u8>, tag: u32, text: &str) {
    put_bytes(out, tag, text.as_bytes());
}

fn put_bytes(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    key(out, tag, LENGTH_DELIMITED);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_fixed64(out: &mut Vec<u8>, tag: u32, n: u64) {
    key(out, tag, FIXED64);
    out.extend_from_slice(&n.to_le_bytes());
}

/// Protobuf's wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;

fn key(out: &mut Vec<u8>, tag: u32, wire_type: u32) {
    varint(out, u64::from(tag << 3 | wire_type));
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn varint_len(n: u64) -> usize {
    // Nearly every length is under 128.
    if n < 0x80 {
        return 1;
    }
    (64 - n.leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    //! The direct encoding read back with the prost messages above.

    use super::*;
    use prost::Message;

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
        }
    }

    #[test]
    fn varints_are_minimal() {
        for n in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut out = Vec::new();
            varint(&mut out, n);
            assert_eq!(out.len(), varint_len(n), "{n}");
            assert_eq!(out.len(), prost::encoding::encoded_len_varint(n), "{n}");
        }
    }

    #[test]
    fn spans_decode_as_the_otlp_messages() {
        let record = SpanRecord {
            trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            span_id: 0x00f067aa0ba902b7,
            parent_id: 0x1234,
            tracestate: Some(b"congo=1".to_vec().into_boxed_slice()),
            name: "GET all".into(),
            kind: SpanKind::Server,
            start_unix_nano: 1_700_000_000_000_000_000,
            end_unix_nano: 1_700_000_000_000_500_000,
            attributes: vec![
                ("http.request.method", AttrValue::Static("GET")),
                ("url.path", AttrValue::Str("/x".repeat(100))),
                ("http.response.status_code", AttrValue::Int(503)),
                ("weir.upstream.connection_reused", AttrValue::Bool(true)),
                ("weir.negative", AttrValue::Int(-1)),
            ],
            events: vec![SpanEvent {
                time_unix_nano: 5,
                name: "weir.error",
                attributes: vec![("error.type", AttrValue::Str("NoRoute".into()))],
            }],
            error: true,
        };
        let mut client = record.clone();
        client.kind = SpanKind::Client;
        client.parent_id = 0;
        client.tracestate = None;
        client.events.clear();
        client.error = false;
        let attributes = [("deployment.environment".to_string(), "test".to_string())];
        let resource = ResourceInfo {
            service_name: "edge",
            attributes: &attributes,
        };
        // A span under 128 bytes, whose length takes one byte.
        let mut tiny = client.clone();
        tiny.attributes.clear();
        tiny.name = "t".into();
        let mut written = SpanBytes::default();
        for span in [record, client, tiny] {
            write_record(&mut written.bytes, &span);
            written.spans += 1;
        }
        // Groups as workers hand them over, an empty one among them.
        let bytes = encode(&resource, &[SpanBytes::default(), written]);
        let request = ExportTraceServiceRequest::decode(&bytes[..]).unwrap();
        let rs = &request.resource_spans[0];
        use any_value::Value as V;
        assert_eq!(
            rs.resource.as_ref().unwrap().attributes,
            vec![
                kv("service.name", V::Str("edge".into())),
                kv("deployment.environment", V::Str("test".into())),
            ]
        );
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().unwrap().name, "weir");
        let (server, client) = (&ss.spans[0], &ss.spans[1]);
        assert_eq!(
            server.trace_id,
            0x4bf92f3577b34da6a3ce929d0e0e4736u128.to_be_bytes()
        );
        assert_eq!(server.span_id, 0x00f067aa0ba902b7u64.to_be_bytes());
        assert_eq!(server.parent_span_id, 0x1234u64.to_be_bytes());
        assert_eq!(server.trace_state, "congo=1");
        assert_eq!(server.name, "GET all");
        assert_eq!((server.kind, client.kind), (2, 3));
        assert_eq!(server.start_time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(server.end_time_unix_nano, 1_700_000_000_000_500_000);
        assert_eq!(
            server.attributes,
            vec![
                kv("http.request.method", V::Str("GET".into())),
                kv("url.path", V::Str("/x".repeat(100))),
                kv("http.response.status_code", V::Int(503)),
                kv("weir.upstream.connection_reused", V::Bool(true)),
                kv("weir.negative", V::Int(-1)),
            ]
        );
        assert_eq!(server.events[0].name, "weir.error");
        assert_eq!(server.events[0].time_unix_nano, 5);
        assert_eq!(
            server.events[0].attributes,
            vec![kv("error.type", V::Str("NoRoute".into()))]
        );
        assert_eq!(server.status.as_ref().unwrap().code, 2);
        assert!(client.parent_span_id.is_empty() && client.trace_state.is_empty());
        assert!(client.status.is_none() && client.events.is_empty());
        assert_eq!(ss.spans[2].name, "t");
        assert!(ss.spans[2].attributes.is_empty());
    }
}
