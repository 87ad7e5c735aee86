//! Answers kept for the report: the first answer of each outcome class for each request template, with its
//! status and its message, decoded by the template's `.proto` type when it names one.
//!
//! For: seeing what the service under test actually answered (a fallback's body, an error's `grpc-message`)
//! beside the counts. Not for: counting (the recorder does that); at most one answer per template and class is
//! kept, so the cost does not grow with the run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use faultline_proto::{MessageDescriptor, Protos};
use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// The most templates whose answers are kept: a mix is a handful of templates.
const MAX_TEMPLATES: usize = 32;
/// The most characters of an answer kept.
const MAX_SHOWN: usize = 600;
/// The most bytes of an answer's body read for its sample.
pub(crate) const MAX_BODY: usize = 64 << 10;

/// One answer as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerSample {
    /// The request template: `grpc /shop.Catalog/GetProduct`, `GET /price/{rand:1..100}`.
    pub request: String,
    /// The answer's outcome class.
    pub class: Outcome,
    /// The HTTP status.
    pub status: u16,
    /// The gRPC status, by name (`OK`, `UNAVAILABLE`), for a gRPC call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<String>,
    /// The `grpc-message`, when the answer carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_message: Option<String>,
    /// The answer's first message, as JSON decoded by its `.proto` type (`shown_as: json`), its bytes as hex
    /// (`hex`), or its body as text (`text`); cut at 600 characters.
    pub answer: String,
    /// How `answer` is written: `json`, `hex`, `text`, or `none` for an answer without a message.
    pub shown_as: String,
    /// When the answer came, in seconds from the start of the run.
    pub at_s: f64,
}

/// What an exchange saw, handed over once its class is known.
pub(crate) struct Seen<'a> {
    pub(crate) template: usize,
    pub(crate) request: &'a str,
    pub(crate) answer_type: Option<&'a MessageDescriptor>,
    pub(crate) class: Outcome,
    pub(crate) status: u16,
    pub(crate) grpc: Option<(String, Option<String>)>,
    pub(crate) body: &'a [Bytes],
    pub(crate) at_s: f64,
}

/// The answers kept so far, by template and class.
pub(crate) struct Samples {
    kept: Mutex<BTreeMap<(usize, Outcome), AnswerSample>>,
    /// Per template, a bit per class that has its answer: what every exchange asks, without the lock.
    classes: [AtomicU8; MAX_TEMPLATES],
}

impl Default for Samples {
    fn default() -> Samples {
        Samples {
            kept: Mutex::default(),
            classes: std::array::from_fn(|_| AtomicU8::new(0)),
        }
    }
}

/// The bits of every class.
const ALL_CLASSES: u8 = (1 << Outcome::ALL.len()) - 1;

impl Samples {
    /// Whether an answer of template `template` could still be kept (some class of it has none yet): the
    /// caller reads the body only then.
    pub(crate) fn open_for(&self, template: usize) -> bool {
        self.classes
            .get(template)
            .is_some_and(|c| c.load(Ordering::Relaxed) != ALL_CLASSES)
    }

    /// Keeps `seen` when its template and class have no answer yet.
    pub(crate) fn offer(&self, seen: Seen<'_>) {
        let Some(classes) = self.classes.get(seen.template) else {
            return;
        };
        let bit = 1u8 << seen.class.index();
        if classes.load(Ordering::Relaxed) & bit != 0 {
            return;
        }
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        kept.entry((seen.template, seen.class))
            .or_insert_with(|| sample(&seen));
        classes.fetch_or(bit, Ordering::Relaxed);
    }

    /// Every answer kept, by template and class.
    pub(crate) fn taken(&self) -> Vec<AnswerSample> {
        self.kept
            .lock()
            .map(|k| k.values().cloned().collect())
            .unwrap_or_default()
    }
}

fn sample(seen: &Seen<'_>) -> AnswerSample {
    let body: Vec<u8> = seen.body.iter().flat_map(|b| b.iter().copied()).collect();
    let (answer, shown_as) = if seen.grpc.is_some() {
        grpc_answer(&body, seen.answer_type)
    } else if body.is_empty() {
        (String::new(), "none")
    } else {
        (String::from_utf8_lossy(&body).into_owned(), "text")
    };
    let (grpc_status, grpc_message) = match &seen.grpc {
        Some((status, message)) => (Some(status.clone()), message.clone()),
        None => (None, None),
    };
    AnswerSample {
        request: seen.request.to_string(),
        class: seen.class,
        status: seen.status,
        grpc_status,
        grpc_message,
        answer: cut(answer),
        shown_as: shown_as.to_string(),
        at_s: seen.at_s,
    }
}

/// The first message of a gRPC answer's body, decoded when its type is known.
fn grpc_answer(body: &[u8], answer_type: Option<&MessageDescriptor>) -> (String, &'static str) {
    let Some((&compressed, rest)) = body.split_first() else {
        return (String::new(), "none");
    };
    let Some(len) = rest
        .get(..4)
        .map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize)
    else {
        return (hex(body), "hex");
    };
    let message = &rest[4..rest.len().min(4 + len)];
    if compressed != 0 {
        return (format!("a compressed message of {len} bytes"), "text");
    }
    if let Some(desc) = answer_type {
        if message.len() == len {
            if let Ok(json) = Protos::decode(desc, message) {
                return (json, "json");
            }
        }
    }
    (hex(message), "hex")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn cut(text: String) -> String {
    if text.chars().count() <= MAX_SHOWN {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_SHOWN - 3).collect();
    cut.push_str("...");
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(template: usize, class: Outcome, body: &'a [Bytes]) -> Seen<'a> {
        Seen {
            template,
            request: "grpc /a.B/C",
            answer_type: None,
            class,
            status: 200,
            grpc: Some(("OK".into(), None)),
            body,
            at_s: 1.0,
        }
    }

    #[test]
    fn the_first_answer_of_each_class_and_template_is_kept() {
        let samples = Samples::default();
        let one = [Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 0x01])];
        let two = [Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 0x02])];
        assert!(samples.open_for(0));
        samples.offer(seen(0, Outcome::Ok, &one));
        samples.offer(seen(0, Outcome::Ok, &two));
        samples.offer(seen(0, Outcome::Fallback, &two));
        samples.offer(seen(1, Outcome::Ok, &[]));
        let taken = samples.taken();
        assert_eq!(taken.len(), 3);
        assert_eq!(
            (taken[0].answer.as_str(), taken[0].shown_as.as_str()),
            ("0801", "hex")
        );
        assert_eq!(taken[1].answer, "0802");
        assert_eq!(taken[2].shown_as, "none");
        for class in Outcome::ALL {
            samples.offer(seen(0, class, &one));
        }
        assert!(!samples.open_for(0));
        assert!(samples.open_for(1));
    }

    #[test]
    fn a_long_answer_is_cut() {
        let body = [Bytes::from(vec![b'x'; 5000])];
        let mut s = seen(0, Outcome::Ok, &body);
        s.grpc = None;
        let a = sample(&s);
        assert_eq!(a.answer.chars().count(), MAX_SHOWN);
        assert!(a.answer.ends_with("..."));
        assert_eq!(a.shown_as, "text");
    }
}
