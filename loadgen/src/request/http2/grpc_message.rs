//! A gRPC request's message, and the type its answers decode as.
//!
//! A message is hex, a file's bytes, or JSON against the method's input type in the request's `.proto` files
//! (`proto`, or `proto_set` as an agent receives them). JSON without generators is encoded once; JSON whose strings
//! carry `{seq}` or `{rand:lo..hi}` is rendered and encoded per request, checked once at compile time with every
//! generator at its largest value. Not for: the HTTP/2 exchange itself (`streams`, `answer`).

use bytes::{BufMut, Bytes, BytesMut};
use faultline_proto::{MessageDescriptor, MessageSpec, ProtoError, Protos};
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::Value;

use crate::request::template::{parse_generators, render_path, PathPart};
use crate::spec::{read_message_file, read_protos, RequestTemplate};
use crate::LoadError;

/// A request's message, framed for the wire (gRPC's 5-byte prefix included).
#[derive(Debug, Clone)]
pub(crate) enum Body {
    Fixed(Bytes),
    Rendered(Box<Rendered>),
}

/// JSON with generators in its strings, encoded per request.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    desc: MessageDescriptor,
    json: Value,
    /// Each string that holds a generator: its JSON pointer and its parts.
    slots: Vec<(String, Vec<PathPart>)>,
    /// The message with every generator at its largest value, checked at compile time: sent should a rendering
    /// fail to encode (a `{seq}` past an int32's range).
    checked: Bytes,
}

/// What a gRPC template compiles to: its message, and the answer's type when the `.proto` files are known.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub(crate) body: Body,
    pub(crate) answer: Option<MessageDescriptor>,
}

/// The `.proto` files compiled so far in one mix, by the list that named them: each set is compiled once.
#[derive(Default)]
pub(crate) struct ProtoCache(Vec<(Vec<String>, Protos)>);

impl ProtoCache {
    fn get(&mut self, t: &RequestTemplate, field: &str) -> Result<Option<Protos>, LoadError> {
        let bad = |at: &str, why: String| LoadError::InvalidSpec {
            field: format!("{field}.{at}"),
            why,
        };
        if let Some(set) = &t.proto_set {
            return Protos::from_descriptor_set_base64(set)
                .map(Some)
                .map_err(|e| bad("proto_set", e.to_string()));
        }
        if t.proto.is_empty() {
            return Ok(None);
        }
        if let Some((_, p)) = self.0.iter().find(|(files, _)| *files == t.proto) {
            return Ok(Some(p.clone()));
        }
        let protos = read_protos(&t.proto).map_err(|e| bad("proto", e.to_string()))?;
        self.0.push((t.proto.clone(), protos.clone()));
        Ok(Some(protos))
    }
}

/// Compiles the message of template `t` (a gRPC call of method `method`) at `field` (`load.requests[i]`).
pub(crate) fn compile(
    t: &RequestTemplate,
    method: &str,
    field: &str,
    cache: &mut ProtoCache,
) -> Result<Compiled, LoadError> {
    let bad = |at: String, why: String| LoadError::InvalidSpec { field: at, why };
    let protos = cache.get(t, field)?;
    let method = match &protos {
        Some(p) => Some(
            p.method(method)
                .map_err(|e| bad(format!("{field}.grpc"), e.to_string()))?,
        ),
        None => None,
    };
    let answer = method.as_ref().map(|m| m.output());
    let bytes = match (&t.message, &t.message_file) {
        (Some(_), Some(_)) => {
            return Err(bad(
                field.to_string(),
                "give message or message_file, not both".into(),
            ))
        }
        (Some(MessageSpec::Hex(hex)), None) => {
            faultline_units::decode_hex(hex).map_err(|why| bad(format!("{field}.message"), why))?
        }
        (Some(MessageSpec::Json(json)), None) => {
            let Some(method) = &method else {
                return Err(bad(
                    format!("{field}.message"),
                    "a message written as JSON needs the .proto files that define its method: \
                     `proto: [path/to/service.proto]`"
                        .into(),
                ));
            };
            let body = json_body(method.input(), &json.json, field)?;
            return Ok(Compiled { body, answer });
        }
        (None, Some(file)) => {
            read_message_file(file).map_err(|why| bad(format!("{field}.message_file"), why))?
        }
        (None, None) => Vec::new(),
    };
    Ok(Compiled {
        body: Body::Fixed(frame(&bytes)),
        answer,
    })
}

/// JSON checked against `desc`: encoded now when it has no generators, kept for rendering when it has.
fn json_body(desc: MessageDescriptor, json: &Value, field: &str) -> Result<Body, LoadError> {
    let mut slots = Vec::new();
    find_generators(json, String::new(), &mut slots).map_err(|(pointer, why)| {
        LoadError::InvalidSpec {
            field: format!("{field}.message.json{}", dotted(&pointer)),
            why,
        }
    })?;
    let mut sample = json.clone();
    fill(&mut sample, &slots, &mut |_, hi| hi, 0);
    let checked = Protos::encode(&desc, &sample).map_err(|e| {
        let (path, why) = match e {
            ProtoError::Field(f) => (f.path, f.why),
            other => (String::new(), other.to_string()),
        };
        let at = if path.is_empty() {
            String::new()
        } else if path.starts_with('[') {
            path
        } else {
            format!(".{path}")
        };
        LoadError::InvalidSpec {
            field: format!("{field}.message.json{at}"),
            why,
        }
    })?;
    let checked = frame(&checked);
    if slots.is_empty() {
        return Ok(Body::Fixed(checked));
    }
    Ok(Body::Rendered(Box::new(Rendered {
        desc,
        json: json.clone(),
        slots,
        checked,
    })))
}

/// Every string in `value` that holds a generator, by JSON pointer.
fn find_generators(
    value: &Value,
    pointer: String,
    out: &mut Vec<(String, Vec<PathPart>)>,
) -> Result<(), (String, String)> {
    match value {
        Value::String(s) if s.contains('{') => {
            let parts = parse_generators(s, false).map_err(|why| (pointer.clone(), why))?;
            if parts.iter().any(|p| !matches!(p, PathPart::Literal(_))) {
                out.push((pointer, parts));
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                find_generators(v, format!("{pointer}/{i}"), out)?;
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let key = k.replace('~', "~0").replace('/', "~1");
                find_generators(v, format!("{pointer}/{key}"), out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A JSON pointer as the dotted path a scenario's field is named by (`/items/2/sku` -> `.items[2].sku`).
fn dotted(pointer: &str) -> String {
    pointer
        .split('/')
        .skip(1)
        .map(|seg| {
            let seg = seg.replace("~1", "/").replace("~0", "~");
            if seg.bytes().all(|b| b.is_ascii_digit()) && !seg.is_empty() {
                format!("[{seg}]")
            } else {
                format!(".{seg}")
            }
        })
        .collect()
}

/// Writes each slot's rendering into `json`.
fn fill(
    json: &mut Value,
    slots: &[(String, Vec<PathPart>)],
    draw: &mut impl FnMut(u64, u64) -> u64,
    index: u64,
) {
    for (pointer, parts) in slots {
        if let Some(v) = json.pointer_mut(pointer) {
            *v = Value::String(render_path(parts, index, draw));
        }
    }
}

impl Body {
    /// The framed message for the arrival `index`.
    pub(crate) fn render(&self, index: u64, rng: &mut StdRng) -> Bytes {
        match self {
            Body::Fixed(b) => b.clone(),
            Body::Rendered(r) => {
                let mut json = r.json.clone();
                fill(
                    &mut json,
                    &r.slots,
                    &mut |lo, hi| rng.random_range(lo..=hi),
                    index,
                );
                match Protos::encode_unchecked(&r.desc, &json) {
                    Ok(bytes) => frame(&bytes),
                    Err(_) => r.checked.clone(),
                }
            }
        }
    }
}

/// A message with gRPC's length prefix: no compression, 4-byte big-endian length.
pub(crate) fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn template(yaml: &str) -> RequestTemplate {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn json_is_encoded_once_or_per_request_and_an_agent_gets_the_same_bytes_from_the_compiled_files(
    ) {
        let dir = std::env::temp_dir().join(format!("loadgen-proto-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let proto = dir.join("shop.proto");
        std::fs::write(
            &proto,
            "syntax = \"proto3\";\npackage shop;\nmessage Req { int64 id = 1; string note = 2; }\n\
             message Product { int64 id = 1; }\nservice Catalog { rpc Get(Req) returns (Product); }\n",
        )
        .unwrap();
        let file = proto.display().to_string();
        let fixed = template(&format!(
            "{{ grpc: /shop.Catalog/Get, proto: [ '{file}' ], message: {{ json: {{ id: 7, note: '{{x}}' }} }} }}"
        ));
        let mut cache = ProtoCache::default();
        let c = compile(&fixed, "/shop.Catalog/Get", "load.requests[0]", &mut cache).unwrap();
        assert_eq!(
            c.answer.as_ref().map(|a| a.full_name()),
            Some("shop.Product")
        );
        let Body::Fixed(bytes) = &c.body else {
            panic!("no generator, yet rendered per request")
        };
        assert_eq!(&bytes[..], b"\x00\x00\x00\x00\x07\x08\x07\x12\x03{x}");
        // With a generator: rendered per request, each call its own value.
        let per_call = template(&format!(
            "{{ grpc: /shop.Catalog/Get, proto: [ '{file}' ], message: {{ json: {{ id: '{{seq}}' }} }} }}"
        ));
        let c = compile(
            &per_call,
            "/shop.Catalog/Get",
            "load.requests[0]",
            &mut cache,
        )
        .unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            &c.body.render(5, &mut rng)[..],
            b"\x00\x00\x00\x00\x02\x08\x05"
        );
        assert_eq!(
            &c.body.render(6, &mut rng)[..],
            b"\x00\x00\x00\x00\x02\x08\x06"
        );
        // An agent gets the files compiled, and the same message from them.
        let mut shipped = fixed.clone();
        shipped.proto_set = Some(read_protos(&shipped.proto).unwrap().descriptor_set_base64());
        shipped.proto.clear();
        let c2 = compile(
            &shipped,
            "/shop.Catalog/Get",
            "load.requests[0]",
            &mut ProtoCache::default(),
        )
        .unwrap();
        assert!(matches!((&c2.body, &c.answer), (Body::Fixed(b), Some(_)) if b == bytes));
        // JSON without .proto files, and a method the files lack, name their field.
        let bare = template("{ grpc: /shop.Catalog/Get, message: { json: { id: 7 } } }");
        let e = compile(&bare, "/shop.Catalog/Get", "load.requests[0]", &mut cache).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("load.requests[0].message: a message written as JSON needs"),
            "{e}"
        );
        let e = compile(&fixed, "/shop.Catalog/Put", "load.requests[0]", &mut cache).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("load.requests[0].grpc: the service shop.Catalog has no method Put"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pointers_read_as_the_fields_a_scenario_names() {
        assert_eq!(dotted("/items/2/sku"), ".items[2].sku");
        assert_eq!(dotted("/a~1b"), ".a/b");
        assert_eq!(dotted(""), "");
    }

    #[test]
    fn generators_in_strings_are_rendered_per_request_and_other_braces_stay() {
        let json: Value =
            serde_json::json!({"sku": "{rand:5..5}", "n": ["{seq}"], "note": "{not one}"});
        let mut slots = Vec::new();
        find_generators(&json, String::new(), &mut slots).unwrap();
        assert_eq!(slots.len(), 2);
        let mut rendered = json.clone();
        let mut rng = StdRng::seed_from_u64(1);
        fill(
            &mut rendered,
            &slots,
            &mut |lo, hi| rng.random_range(lo..=hi),
            7,
        );
        assert_eq!(
            rendered,
            serde_json::json!({"sku": "5", "n": ["7"], "note": "{not one}"})
        );
    }
}
