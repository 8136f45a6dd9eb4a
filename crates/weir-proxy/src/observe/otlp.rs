//! The OTLP trace messages weir sends (`opentelemetry/proto/collector/trace/v1` and the
//! messages it names, field numbers as in the opentelemetry-proto repository), and a batch of
//! finished spans encoded as one `ExportTraceServiceRequest`.

use crate::observe::spans::{AttrValue, Attributes, SpanKind, SpanRecord};
use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct ExportTraceServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_spans: Vec<ScopeSpans>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ScopeSpans {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub spans: Vec<Span>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
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

#[derive(Clone, PartialEq, Message)]
pub struct Event {
    #[prost(fixed64, tag = "1")]
    pub time_unix_nano: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(string, tag = "2")]
    pub message: String,
    /// 0: unset, 2: error.
    #[prost(int32, tag = "3")]
    pub code: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    #[prost(oneof = "any_value::Value", tags = "1, 2, 3")]
    pub value: Option<any_value::Value>,
}

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

fn key_value(key: &str, value: &AttrValue) -> KeyValue {
    let value = match value {
        AttrValue::Str(s) => any_value::Value::Str(s.clone()),
        AttrValue::Int(n) => any_value::Value::Int(*n),
        AttrValue::Bool(b) => any_value::Value::Bool(*b),
    };
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

fn key_values(attributes: &Attributes) -> Vec<KeyValue> {
    attributes.iter().map(|(k, v)| key_value(k, v)).collect()
}

/// What the exported resource says of this process.
pub struct ResourceInfo<'a> {
    pub service_name: &'a str,
    pub attributes: &'a [(String, String)],
}

/// `spans` as one export request's protobuf bytes.
pub fn encode(resource: &ResourceInfo<'_>, spans: &[SpanRecord]) -> Vec<u8> {
    let mut attributes = vec![key_value(
        "service.name",
        &AttrValue::Str(resource.service_name.to_string()),
    )];
    for (k, v) in resource.attributes {
        attributes.push(key_value(k, &AttrValue::Str(v.clone())));
    }
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource { attributes }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "weir".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                spans: spans.iter().map(span).collect(),
            }],
        }],
    };
    request.encode_to_vec()
}

fn span(record: &SpanRecord) -> Span {
    Span {
        trace_id: record.trace_id.to_be_bytes().to_vec(),
        span_id: record.span_id.to_be_bytes().to_vec(),
        trace_state: record
            .tracestate
            .as_deref()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_default(),
        parent_span_id: match record.parent_id {
            0 => Vec::new(),
            id => id.to_be_bytes().to_vec(),
        },
        name: record.name.clone(),
        kind: match record.kind {
            SpanKind::Server => 2,
            SpanKind::Client => 3,
        },
        start_time_unix_nano: record.start_unix_nano,
        end_time_unix_nano: record.end_unix_nano,
        attributes: key_values(&record.attributes),
        events: record
            .events
            .iter()
            .map(|e| Event {
                time_unix_nano: e.time_unix_nano,
                name: e.name.to_string(),
                attributes: key_values(&e.attributes),
            })
            .collect(),
        status: record.error.then(|| Status {
            message: String::new(),
            code: 2,
        }),
    }
}
