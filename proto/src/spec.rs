//! A message as a scenario writes it: protobuf bytes as hex (`0a0568656c6c6f`), or JSON (`{json: {id: 42}}`)
//! against a type of the `.proto` files named beside it.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A gRPC message: its bytes as hex (spaces allowed), or `{json: {...}}` in protobuf's JSON mapping.
#[derive(Debug, Clone, PartialEq)]
pub enum MessageSpec {
    /// The bytes as hex, e.g. `0a0568656c6c6f`.
    Hex(String),
    /// The message written as JSON (YAML in a scenario), checked and encoded against its `.proto` type.
    Json(JsonMessage),
}

/// `{json: {...}}`: a message in protobuf's JSON mapping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonMessage {
    /// The message's fields, named as in the `.proto` file or in their lowerCamelCase JSON form.
    pub json: serde_json::Value,
}

impl MessageSpec {
    /// The hex, when the message is written so.
    pub fn hex(&self) -> Option<&str> {
        match self {
            MessageSpec::Hex(h) => Some(h),
            MessageSpec::Json(_) => None,
        }
    }

    /// The JSON, when the message is written so.
    pub fn json(&self) -> Option<&serde_json::Value> {
        match self {
            MessageSpec::Hex(_) => None,
            MessageSpec::Json(j) => Some(&j.json),
        }
    }
}

impl From<&str> for MessageSpec {
    /// Hex.
    fn from(hex: &str) -> MessageSpec {
        MessageSpec::Hex(hex.to_string())
    }
}

impl Serialize for MessageSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MessageSpec::Hex(h) => s.serialize_str(h),
            MessageSpec::Json(j) => j.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for MessageSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXPECTING: &str =
            "the message's bytes as hex (e.g. 0a0568656c6c6f) or {json: {...}} against its .proto";
        /// YAML reads hex of digits alone (`0801`) as a number, dropping a leading zero. A protobuf message never
        /// begins with a zero byte (its first byte is a tag, field numbers start at 1), so the hex had at most one
        /// leading `0`, and only when the number's digits are odd in count: restored exactly.
        fn digits(n: u64) -> MessageSpec {
            let text = n.to_string();
            MessageSpec::Hex(if !text.len().is_multiple_of(2) {
                format!("0{text}")
            } else {
                text
            })
        }
        fn unreadable<E: de::Error>() -> E {
            E::custom("this hex reads as a number in YAML: quote it, e.g. message: '0801'")
        }
        impl<'de> Visitor<'de> for V {
            type Value = MessageSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(EXPECTING)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MessageSpec, E> {
                Ok(MessageSpec::Hex(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<MessageSpec, E> {
                Ok(digits(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<MessageSpec, E> {
                u64::try_from(n).map(digits).map_err(|_| unreadable())
            }
            fn visit_f64<E: de::Error>(self, f: f64) -> Result<MessageSpec, E> {
                // Digits past u64's range arrive as a float: exact only while it holds them all.
                if f.fract() == 0.0 && (0.0..9.0e15).contains(&f) {
                    Ok(digits(f as u64))
                } else {
                    Err(unreadable())
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageSpec, A::Error> {
                let mut json = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key != "json" {
                        return Err(de::Error::unknown_field(&key, &["json"]));
                    }
                    if json.is_some() {
                        return Err(de::Error::duplicate_field("json"));
                    }
                    json = Some(map.next_value::<serde_json::Value>()?);
                }
                let json = json.ok_or_else(|| de::Error::missing_field("json"))?;
                Ok(MessageSpec::Json(JsonMessage { json }))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for MessageSpec {
    fn schema_name() -> Cow<'static, str> {
        "MessageSpec".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let json = generator.subschema_for::<JsonMessage>();
        json_schema!({
            "description": "A gRPC message: its bytes as hex (spaces allowed), or {json: {...}} in protobuf's JSON mapping against a type of the `proto` files.",
            "oneOf": [
                { "type": "string", "description": "The message's bytes as hex, e.g. 0a0568656c6c6f." },
                json
            ]
        })
    }
}
