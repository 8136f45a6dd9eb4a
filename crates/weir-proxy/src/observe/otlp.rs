//! The OTLP trace messages weir sends (`opentelemetry/proto/collector/trace/v1` and the
//! messages it names, field numbers as in the opentelemetry-proto repository), and a batch of
//! finished spans encoded as one `ExportTraceServiceRequest`: written straight from the span
//! records in protobuf's wire format (building prost's messages first copied every key and
//! value and measured each nested message again at every level: 16,000 instructions a request
//! of two spans, callgrind); the prost messages read that encoding back in the tests.

use crate::observe::spans::{AttrValue, Attributes, EncodedSpan, SpanEvent, SpanKind, SpanRecord};

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

/// `spans` as one export request's protobuf bytes.
pub fn encode(resource: &ResourceInfo<'_>, spans: &[EncodedSpan]) -> Vec<u8> {
    let mut scratch = Vec::with_capacity(1024);
    // ScopeSpans: the scope, then each span as the worker wrote it.
    let written: usize = spans.iter().map(|s| s.0.len()).sum();
    let mut scope_spans = Vec::with_capacity(written + 64);
    put_str(&mut scratch, 1, "weir");
    put_str(&mut scratch, 2, env!("CARGO_PKG_VERSION"));
    put_message(&mut scope_spans, 1, &scratch);
    for span in spans {
        scope_spans.extend_from_slice(&span.0);
    }
    // ResourceSpans: the resource, then the scope's spans.
    scratch.clear();
    put_key_value(
        &mut scratch,
        1,
        "service.name",
        &Value::Str(resource.service_name),
    );
    for (key, value) in resource.attributes {
        put_key_value(&mut scratch, 1, key, &Value::Str(value));
    }
    let mut resource_spans = Vec::with_capacity(scope_spans.len() + scratch.len() + 16);
    put_message(&mut resource_spans, 1, &scratch);
    put_message(&mut resource_spans, 2, &scope_spans);
    let mut out = Vec::with_capacity(resource_spans.len() + 8);
    put_message(&mut out, 1, &resource_spans);
    out
}

/// A span written in protobuf as it is described, by the worker that served it: its
/// attributes go straight from the request into the bytes the exporter sends, with no record
/// of copied strings in between (that record, its drop and its encoding on the exporter cost
/// a traced request 5,000 instructions more, callgrind).
pub struct SpanWriter {
    out: Vec<u8>,
}

/// Who a span is: its trace, its own id and its parent's (0: a root span), and the trace
/// state it carries.
pub struct SpanIds<'a> {
    pub trace_id: u128,
    pub span_id: u64,
    pub parent_id: u64,
    pub tracestate: Option<&'a [u8]>,
}

impl SpanWriter {
    pub fn begin(ids: SpanIds<'_>, kind: SpanKind, start_unix_nano: u64) -> SpanWriter {
        let mut out = Vec::with_capacity(768);
        // `ScopeSpans.spans` (2), with two bytes kept for its length (`finish`).
        key(&mut out, 2, LENGTH_DELIMITED);
        out.extend_from_slice(&[0, 0]);
        put_bytes(&mut out, 1, &ids.trace_id.to_be_bytes());
        put_bytes(&mut out, 2, &ids.span_id.to_be_bytes());
        if let Some(state) = ids.tracestate {
            put_bytes(&mut out, 3, state);
        }
        if ids.parent_id != 0 {
            put_bytes(&mut out, 4, &ids.parent_id.to_be_bytes());
        }
        let kind = match kind {
            SpanKind::Server => 2,
            SpanKind::Client => 3,
        };
        out.extend_from_slice(&[6 << 3 | VARINT as u8, kind]);
        put_fixed64(&mut out, 7, start_unix_nano);
        SpanWriter { out }
    }

    /// The span's name, the concatenation of `parts`.
    pub fn name(&mut self, parts: &[&str]) {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        key(&mut self.out, 5, LENGTH_DELIMITED);
        varint(&mut self.out, len as u64);
        for part in parts {
            self.out.extend_from_slice(part.as_bytes());
        }
    }

    pub fn str(&mut self, name: &str, value: &str) {
        put_key_value(&mut self.out, 9, name, &Value::Str(value));
    }

    /// A string attribute that is the concatenation of `parts`.
    pub fn str_parts(&mut self, name: &str, parts: &[&str]) {
        put_key_value(&mut self.out, 9, name, &Value::Parts(parts));
    }

    pub fn int(&mut self, name: &str, value: i64) {
        put_key_value(&mut self.out, 9, name, &Value::Int(value));
    }

    pub fn bool(&mut self, name: &str, value: bool) {
        put_key_value(&mut self.out, 9, name, &Value::Bool(value));
    }

    pub fn attributes(&mut self, attributes: &Attributes) {
        put_attributes(&mut self.out, 9, attributes);
    }

    pub fn events(&mut self, events: &[SpanEvent]) {
        for event in events {
            let mut body = Vec::with_capacity(128);
            put_fixed64(&mut body, 1, event.time_unix_nano);
            put_str(&mut body, 2, event.name);
            put_attributes(&mut body, 3, &event.attributes);
            put_message(&mut self.out, 11, &body);
        }
    }

    /// The span ended at `end_unix_nano`, its status Error when `error`.
    pub fn finish(mut self, end_unix_nano: u64, error: bool) -> EncodedSpan {
        put_fixed64(&mut self.out, 8, end_unix_nano);
        if error {
            // Status { code: STATUS_CODE_ERROR }.
            put_message(&mut self.out, 15, &[3 << 3, 2]);
        }
        // The two bytes kept fit the length unless the span is shorter than 128 bytes or
        // longer than 16 KiB (then the body moves).
        let len = self.out.len() - 3;
        if (128..16384).contains(&len) {
            self.out[1] = (len as u8 & 0x7f) | 0x80;
            self.out[2] = (len >> 7) as u8;
        } else {
            let mut prefix = Vec::with_capacity(3);
            varint(&mut prefix, len as u64);
            self.out.splice(1..3, prefix);
        }
        EncodedSpan(self.out)
    }
}

/// A span described as a record (TCP connections', and the tests'), written as a worker's is.
pub fn encode_record(span: &SpanRecord) -> EncodedSpan {
    let ids = SpanIds {
        trace_id: span.trace_id,
        span_id: span.span_id,
        parent_id: span.parent_id,
        tracestate: span.tracestate.as_deref(),
    };
    let mut writer = SpanWriter::begin(ids, span.kind, span.start_unix_nano);
    writer.name(&[&span.name]);
    writer.attributes(&span.attributes);
    writer.events(&span.events);
    writer.finish(span.end_unix_nano, span.error)
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

/// A `KeyValue` (key 1, `AnyValue` 2: string 1, bool 2, int 3) as field `tag`.
fn put_key_value(out: &mut Vec<u8>, tag: u32, name: &str, value: &Value<'_>) {
    let any_len = match value {
        Value::Str(s) => 1 + varint_len(s.len() as u64) + s.len(),
        Value::Parts(parts) => {
            let n = parts.iter().map(|p| p.len()).sum::<usize>();
            1 + varint_len(n as u64) + n
        }
        Value::Int(n) => 1 + varint_len(*n as u64),
        Value::Bool(_) => 2,
    };
    let name_len = 1 + varint_len(name.len() as u64) + name.len();
    let len = name_len + 1 + varint_len(any_len as u64) + any_len;
    // The field's framing is built on the stack and appended in one piece, then the name,
    // the value's framing, the value: an attribute is four appends, not a dozen pushes.
    let mut framing = Framing::default();
    framing.varint(u64::from(tag << 3 | LENGTH_DELIMITED));
    framing.varint(len as u64);
    framing.varint(u64::from(1 << 3 | LENGTH_DELIMITED));
    framing.varint(name.len() as u64);
    out.reserve(len + 12);
    out.extend_from_slice(framing.bytes());
    out.extend_from_slice(name.as_bytes());
    let mut framing = Framing::default();
    framing.varint(u64::from(2 << 3 | LENGTH_DELIMITED));
    framing.varint(any_len as u64);
    match value {
        Value::Str(s) => {
            framing.varint(u64::from(1 << 3 | LENGTH_DELIMITED));
            framing.varint(s.len() as u64);
            out.extend_from_slice(framing.bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Value::Parts(parts) => {
            let n = parts.iter().map(|p| p.len()).sum::<usize>();
            framing.varint(u64::from(1 << 3 | LENGTH_DELIMITED));
            framing.varint(n as u64);
            out.extend_from_slice(framing.bytes());
            for part in *parts {
                out.extend_from_slice(part.as_bytes());
            }
        }
        Value::Bool(b) => {
            framing.varint(u64::from(2 << 3 | VARINT));
            framing.varint(u64::from(*b));
            out.extend_from_slice(framing.bytes());
        }
        Value::Int(n) => {
            framing.varint(u64::from(3 << 3 | VARINT));
            framing.varint(*n as u64);
            out.extend_from_slice(framing.bytes());
        }
    }
}

/// A few bytes of keys and lengths, gathered before they are appended.
struct Framing {
    /// Four varints at most, of ten bytes at most.
    bytes: [u8; 40],
    len: usize,
}

impl Default for Framing {
    fn default() -> Framing {
        Framing {
            bytes: [0; 40],
            len: 0,
        }
    }
}

impl Framing {
    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.bytes[self.len] = n as u8 | 0x80;
            self.len += 1;
            n >>= 7;
        }
        self.bytes[self.len] = n as u8;
        self.len += 1;
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
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
    (64 - (n | 1).leading_zeros() as usize).div_ceil(7)
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
        let written: Vec<EncodedSpan> = [record, client, tiny].iter().map(encode_record).collect();
        let bytes = encode(&resource, &written);
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
