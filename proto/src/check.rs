//! A message written as JSON, checked field by field against its type before it is encoded: an unknown field or
//! a value of the wrong type is named with its path and the type that holds it.
//!
//! The rules are protobuf's JSON mapping (proto3): integers as numbers or strings of digits, 64-bit ones too;
//! floats as numbers, strings of numbers, `NaN` and `Infinity`; enums by name or number; bytes as base64; `null`
//! for a field at its default. The well-known types (`google.protobuf.Timestamp`, `Duration`, `Struct`, ...),
//! whose JSON forms are their own, are judged by prost-reflect.

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor};
use serde_json::Value;

/// A message that does not fit its type: where (a path below the message, e.g. `items[2].sku`; empty for the
/// message itself) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{why}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct FieldError {
    pub path: String,
    pub why: String,
}

/// Checks `value` as a message of type `desc`.
pub(crate) fn message(desc: &MessageDescriptor, value: &Value) -> Result<(), FieldError> {
    check_message(desc, value, "")
}

fn at(path: &str, more: &str) -> String {
    if path.is_empty() {
        more.to_string()
    } else if more.starts_with('[') {
        format!("{path}{more}")
    } else {
        format!("{path}.{more}")
    }
}

fn check_message(desc: &MessageDescriptor, value: &Value, path: &str) -> Result<(), FieldError> {
    if desc.full_name().starts_with("google.protobuf.") {
        return DynamicMessage::deserialize(desc.clone(), value)
            .map(drop)
            .map_err(|e| FieldError {
                path: path.to_string(),
                why: format!("not a {} ({e})", desc.full_name()),
            });
    }
    let Value::Object(fields) = value else {
        return Err(FieldError {
            path: path.to_string(),
            why: format!(
                "{} is a message: write its fields as a map, e.g. {{{}: ...}}, not {}",
                desc.full_name(),
                desc.fields()
                    .next()
                    .map_or("field".to_string(), |f| f.name().to_string()),
                shown(value)
            ),
        });
    };
    for (name, v) in fields {
        let field = desc
            .get_field_by_name(name)
            .or_else(|| desc.get_field_by_json_name(name))
            .ok_or_else(|| FieldError {
                path: at(path, name),
                why: format!(
                    "{} has no field {name:?} (its fields: {})",
                    desc.full_name(),
                    field_names(desc)
                ),
            })?;
        check_field(&field, v, &at(path, name))?;
    }
    Ok(())
}

fn field_names(desc: &MessageDescriptor) -> String {
    let names: Vec<String> = desc.fields().map(|f| f.name().to_string()).collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

fn check_field(field: &FieldDescriptor, value: &Value, path: &str) -> Result<(), FieldError> {
    if value.is_null() {
        return Ok(());
    }
    let owner = field.parent_message();
    let name = format!("{}.{}", owner.full_name(), field.name());
    if field.is_map() {
        let Value::Object(entries) = value else {
            return Err(FieldError {
                path: path.to_string(),
                why: format!(
                    "{name} is a map: write it as one, e.g. {{key: value}}, not {}",
                    shown(value)
                ),
            });
        };
        let Kind::Message(entry) = field.kind() else {
            return Ok(());
        };
        let value_field = entry.map_entry_value_field();
        for (key, v) in entries {
            check_single(
                &value_field.kind(),
                v,
                &at(path, key),
                &format!("{name}[{key:?}]"),
            )?;
        }
        return Ok(());
    }
    if field.is_list() {
        let Value::Array(items) = value else {
            return Err(FieldError {
                path: path.to_string(),
                why: format!(
                    "{name} is repeated: write a list, e.g. [{}], not one value",
                    shown(value)
                ),
            });
        };
        for (i, v) in items.iter().enumerate() {
            check_single(
                &field.kind(),
                v,
                &at(path, &format!("[{i}]")),
                &format!("{name}[{i}]"),
            )?;
        }
        return Ok(());
    }
    check_single(&field.kind(), value, path, &name)
}

/// One value of `kind` (a field's, a list item's or a map value's); `name` says which, for the error.
fn check_single(kind: &Kind, value: &Value, path: &str, name: &str) -> Result<(), FieldError> {
    let wrong = |expects: &str| FieldError {
        path: path.to_string(),
        why: format!("{name} is {expects}, not {}", shown(value)),
    };
    match kind {
        Kind::Message(m) => check_message(m, value, path),
        Kind::Enum(e) => {
            if e.full_name() == "google.protobuf.NullValue" && value.is_null() {
                return Ok(());
            }
            let fits = match value {
                Value::String(s) => e.get_value_by_name(s).is_some(),
                Value::Number(n) => n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                _ => false,
            };
            if fits {
                Ok(())
            } else {
                let names: Vec<String> = e.values().map(|v| v.name().to_string()).collect();
                Err(wrong(&format!(
                    "the enum {} (one of {})",
                    e.full_name(),
                    names.join(", ")
                )))
            }
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            integer(value, i64::from(i32::MIN), i64::from(i32::MAX))
                .ok_or_else(|| wrong(&kind_words(kind)))
        }
        Kind::Uint32 | Kind::Fixed32 => {
            integer(value, 0, i64::from(u32::MAX)).ok_or_else(|| wrong(&kind_words(kind)))
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            integer(value, i64::MIN, i64::MAX).ok_or_else(|| wrong(&kind_words(kind)))
        }
        Kind::Uint64 | Kind::Fixed64 => unsigned(value).ok_or_else(|| wrong(&kind_words(kind))),
        Kind::Float | Kind::Double => {
            let fits = match value {
                Value::Number(_) => true,
                Value::String(s) => {
                    matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity")
                        || s.trim().parse::<f64>().is_ok()
                }
                _ => false,
            };
            fits.then_some(()).ok_or_else(|| wrong(&kind_words(kind)))
        }
        Kind::Bool => value
            .is_boolean()
            .then_some(())
            .ok_or_else(|| wrong("a bool (true or false)")),
        Kind::String => value
            .is_string()
            .then_some(())
            .ok_or_else(|| wrong("a string")),
        Kind::Bytes => {
            // Base64, standard or URL-safe, padded or not: protobuf's JSON mapping for bytes.
            let fits = value.as_str().is_some_and(|s| {
                s.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'=')
                })
            });
            fits.then_some(())
                .ok_or_else(|| wrong("bytes (written as base64)"))
        }
    }
}

fn kind_words(kind: &Kind) -> String {
    let name = match kind {
        Kind::Int32 => "int32",
        Kind::Sint32 => "sint32",
        Kind::Sfixed32 => "sfixed32",
        Kind::Uint32 => "uint32",
        Kind::Fixed32 => "fixed32",
        Kind::Int64 => "int64",
        Kind::Sint64 => "sint64",
        Kind::Sfixed64 => "sfixed64",
        Kind::Uint64 => "uint64",
        Kind::Fixed64 => "fixed64",
        Kind::Float => return "a float (a number, or \"NaN\", \"Infinity\", \"-Infinity\")".into(),
        Kind::Double => {
            return "a double (a number, or \"NaN\", \"Infinity\", \"-Infinity\")".into()
        }
        _ => "value",
    };
    let article = if name.starts_with("int") { "an" } else { "a" };
    format!("{article} {name} (a whole number in its range, or one written as a string)")
}

/// Whether `value` is a whole number in `lo..=hi`, as a number (a float with no fraction too) or a string.
fn integer(value: &Value, lo: i64, hi: i64) -> Option<()> {
    let n: i64 = match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        })?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    (lo..=hi).contains(&n).then_some(())
}

fn unsigned(value: &Value) -> Option<()> {
    match value {
        Value::Number(n) => n.as_u64().map(drop).or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
                .map(drop)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok().map(drop),
        _ => None,
    }
}

/// A value as a reader would recognise it in an error: short, JSON.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!("{}...", text.chars().take(37).collect::<String>())
    } else {
        text
    }
}
