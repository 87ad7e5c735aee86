//! OTLP/JSON trace exports, as the OpenTelemetry SDKs' and the Collector's file exporters write them: documents of
//! `resourceSpans[].scopeSpans[].spans[]`, one per line (JSON Lines), or one document (pretty-printed or not), or
//! several one after the other. Read one document at a time, so a long export needs the memory of its largest
//! document, not of the file.
//!
//! A SERVER span is a request that arrived at the SUT: its start, `http.request.method` (or `http.method`), its
//! path from `url.path` with `url.query` (or `http.target`, or `http.route`), `http.response.status_code` (or
//! `http.status_code`), its duration. A CLIENT span is a call the service made to a dependency named by
//! `server.address` (or `net.peer.name`, or `peer.service`) with `server.port` (or `net.peer.port`), or the host
//! of `url.full`; its latency is the span's duration, its outcome the status attribute, else, for a span with
//! status ERROR, a timeout when `error.type` says so and a failed connection otherwise. Spans end before their
//! parents, so an exporter writes a CLIENT span before the SERVER span it served: each call is added on its own
//! at its start time rather than joined to its request, which would mean holding spans until their parents
//! come. Other kinds (INTERNAL, PRODUCER, CONSUMER) are not requests and are passed over.

use std::io::{BufRead, Read};

use serde::Deserialize;
use serde_json::Value;

use super::{CallOutcome, DependencyCall, Entry, Record};

/// What a document of the export holds, in order: each span it reads as a request or a call (`None` for a span
/// of another kind), or why a span is not one.
pub type Spans = Vec<Result<Option<Entry>, String>>;

/// Reads an export one document at a time.
pub struct Documents<R> {
    reader: Lines<R>,
    /// Whether each line is a document of its own (decided on the first document).
    json_lines: Option<bool>,
}

/// A document: the line it begins on, and its spans or why it is not an OTLP/JSON document.
pub struct Document {
    pub line: usize,
    pub spans: Result<Spans, String>,
}

impl<R: BufRead> Documents<R> {
    pub fn new(reader: R) -> Self {
        Documents {
            reader: Lines {
                inner: reader,
                line: 1,
            },
            json_lines: None,
        }
    }

    /// The next document, `Ok(None)` at the end. A document that is not JSON ends the reading with an error when
    /// the export is not JSON Lines: inside one long document there is no next line to start again from.
    pub fn next_document(&mut self) -> Result<Option<Document>, std::io::Error> {
        self.reader.skip_blank()?;
        let line = self.reader.line;
        if self.reader.at_end()? {
            return Ok(None);
        }
        let json_lines = match self.json_lines {
            Some(j) => j,
            None => {
                // JSON Lines when the first line is a whole document; a pretty-printed document's first line is
                // `{` alone, or an opening that does not close on its line.
                let first = self.reader.peek_line()?;
                let whole = serde_json::from_slice::<serde::de::IgnoredAny>(&first).is_ok();
                self.json_lines = Some(whole);
                whole
            }
        };
        if json_lines {
            let mut text = Vec::new();
            self.reader.read_line(&mut text)?;
            let spans = serde_json::from_slice::<Value>(&text)
                .map_err(|e| format!("not JSON: {e}"))
                .and_then(|doc| spans(&doc));
            return Ok(Some(Document { line, spans }));
        }
        let mut de = serde_json::Deserializer::from_reader(&mut self.reader);
        match Value::deserialize(&mut de) {
            Ok(doc) => Ok(Some(Document {
                line,
                spans: spans(&doc),
            })),
            Err(e) if e.is_io() => Err(std::io::Error::other(e)),
            Err(e) => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "line {}: the document that begins on line {line} is not JSON: {e}",
                    self.reader.line
                ),
            )),
        }
    }
}

/// A buffered reader that counts the lines it has handed out.
struct Lines<R> {
    inner: R,
    /// The line the next byte is on, from 1.
    line: usize,
}

impl<R: BufRead> Lines<R> {
    fn skip_blank(&mut self) -> std::io::Result<()> {
        loop {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            let n = buf
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(buf.len());
            self.line += buf[..n].iter().filter(|b| **b == b'\n').count();
            let done = n < buf.len();
            self.inner.consume(n);
            if done {
                return Ok(());
            }
        }
    }

    fn at_end(&mut self) -> std::io::Result<bool> {
        Ok(self.inner.fill_buf()?.is_empty())
    }

    /// The current line without consuming it, as far as the buffer holds it: enough to tell a whole document
    /// from the opening of a pretty-printed one (a JSON Lines document longer than the buffer is taken as
    /// pretty-printed, which reads it the same way, only without going on past a bad line).
    fn peek_line(&mut self) -> std::io::Result<Vec<u8>> {
        let buf = self.inner.fill_buf()?;
        let end = buf.iter().position(|b| *b == b'\n').unwrap_or(buf.len());
        Ok(buf[..end].to_vec())
    }

    fn read_line(&mut self, out: &mut Vec<u8>) -> std::io::Result<usize> {
        let n = self.inner.read_until(b'\n', out)?;
        self.line += out.iter().filter(|b| **b == b'\n').count();
        Ok(n)
    }
}

impl<R: BufRead> Read for Lines<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        self.line += out[..n].iter().filter(|b| **b == b'\n').count();
        Ok(n)
    }
}

/// The spans of one document.
pub fn spans(doc: &Value) -> Result<Spans, String> {
    let resources = doc
        .get("resourceSpans")
        .or_else(|| doc.get("resource_spans"))
        .and_then(Value::as_array)
        .ok_or("not an OTLP/JSON trace document: it has no resourceSpans")?;
    let mut out = Vec::new();
    for (r, resource) in resources.iter().enumerate() {
        let scopes = resource
            .get("scopeSpans")
            .or_else(|| resource.get("scope_spans"))
            .and_then(Value::as_array);
        for (s, scope) in scopes.into_iter().flatten().enumerate() {
            let spans = scope["spans"].as_array();
            for (i, span) in spans.into_iter().flatten().enumerate() {
                out.push(entry(span).map_err(|why| {
                    format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}]: {why}")
                }));
            }
        }
    }
    Ok(out)
}

/// A span's kind as its number: OTLP/JSON writes the enum's number, protobuf's JSON mapping its name.
fn kind(span: &Value) -> Option<u64> {
    match &span["kind"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => [
            "SPAN_KIND_UNSPECIFIED",
            "SPAN_KIND_INTERNAL",
            "SPAN_KIND_SERVER",
            "SPAN_KIND_CLIENT",
            "SPAN_KIND_PRODUCER",
            "SPAN_KIND_CONSUMER",
        ]
        .iter()
        .position(|k| k == s)
        .map(|k| k as u64),
        _ => None,
    }
}

const SERVER: u64 = 2;
const CLIENT: u64 = 3;

/// The value of the first of `keys` among OTLP attributes (`[{key, value: {stringValue | intValue | ...}}]`).
fn attribute<'a>(attributes: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    let list = attributes.as_array()?;
    keys.iter().find_map(|k| {
        list.iter()
            .find(|a| a["key"].as_str() == Some(k))
            .and_then(|a| a["value"].as_object())
            .and_then(|v| v.values().next())
    })
}

fn text(attributes: &Value, keys: &[&str]) -> Option<String> {
    attribute(attributes, keys).and_then(|v| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// An integer attribute: OTLP/JSON writes 64-bit integers as strings.
fn integer(attributes: &Value, keys: &[&str]) -> Result<Option<u64>, String> {
    match attribute(attributes, keys) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{} is not a whole number: {n}", keys[0])),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("{} is not a whole number: {s:?}", keys[0])),
        Some(other) => Err(format!("{} is not a whole number: {other}", keys[0])),
    }
}

/// Nanoseconds since the Unix epoch, written as a string (OTLP/JSON) or a number.
fn nanos(span: &Value, key: &str) -> Result<u64, String> {
    match &span[key] {
        Value::String(s) => s
            .parse()
            .map_err(|_| format!("{key} {s:?} is not nanoseconds")),
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{key} {n} is not nanoseconds")),
        Value::Null => Err(format!("the span has no {key}")),
        other => Err(format!("{key} {other} is not nanoseconds")),
    }
}

fn entry(span: &Value) -> Result<Option<Entry>, String> {
    let kind = kind(span);
    if kind != Some(SERVER) && kind != Some(CLIENT) {
        return Ok(None);
    }
    let start = nanos(span, "startTimeUnixNano")?;
    let end = nanos(span, "endTimeUnixNano")?;
    if end < start {
        return Err(format!("it ends ({end} ns) before it starts ({start} ns)"));
    }
    let at = start as f64 / 1e9;
    let duration = Some((end - start) as f64 / 1e9);
    let attrs = span.get("attributes").unwrap_or(&Value::Null);
    let status = integer(attrs, &["http.response.status_code", "http.status_code"])?
        .map(|s| u16::try_from(s).map_err(|_| format!("{s} is not an HTTP status")))
        .transpose()?;
    if kind == Some(SERVER) {
        let method = text(attrs, &["http.request.method", "http.method"])
            .ok_or("the SERVER span has no http.request.method (or http.method)")?
            .to_ascii_uppercase();
        let target = match text(attrs, &["url.path"]) {
            Some(path) => match text(attrs, &["url.query"]) {
                Some(q) if !q.is_empty() => format!("{path}?{q}"),
                _ => path,
            },
            None => text(attrs, &["http.target", "http.route"])
                .ok_or("the SERVER span has no url.path, http.target or http.route")?,
        };
        if !target.starts_with('/') {
            return Err(format!("the path {target:?} does not start with /"));
        }
        return Ok(Some(Entry::Request(Record {
            arrival: at,
            method,
            target,
            status,
            duration,
            calls: Vec::new(),
        })));
    }
    let peer = peer(attrs).ok_or("the CLIENT span names no dependency (server.address, net.peer.name, peer.service or url.full)")?;
    let error = matches!(&span["status"]["code"], Value::Number(n) if n.as_u64() == Some(2))
        || span["status"]["code"].as_str() == Some("STATUS_CODE_ERROR");
    let outcome = match status {
        Some(s) => CallOutcome::Status(s),
        None if error => {
            let why = text(attrs, &["error.type"])
                .unwrap_or_default()
                .to_ascii_lowercase();
            if why.contains("timeout") || why.contains("timedout") || why.contains("deadline") {
                CallOutcome::Timeout
            } else {
                CallOutcome::Reset
            }
        }
        // A call that is not HTTP (a database, a cache) and did not fail.
        None => CallOutcome::Status(200),
    };
    Ok(Some(Entry::Call(DependencyCall {
        peer,
        at,
        duration,
        outcome,
    })))
}

/// The dependency a CLIENT span called: its address and port, its peer service, or the host of its URL.
fn peer(attrs: &Value) -> Option<String> {
    let host = text(attrs, &["server.address", "net.peer.name", "peer.service"]).or_else(|| {
        let url = text(attrs, &["url.full", "http.url"])?;
        let rest = url.split_once("://")?.1;
        let authority = rest.split(['/', '?', '#']).next()?;
        (!authority.is_empty()).then(|| authority.to_string())
    })?;
    if host.contains(':') && !host.starts_with('[') {
        return Some(host);
    }
    match text(attrs, &["server.port", "net.peer.port"]) {
        Some(port) => Some(format!("{host}:{port}")),
        None => Some(host),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SERVER span and its CLIENT span as the Python SDK's OTLP JSON file exporter writes them (children first,
    /// one export per line).
    const EXPORT: &str = concat!(
        r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"shop"}}]},"scopeSpans":[{"scope":{"name":"x"},"spans":[{"traceId":"ff63","spanId":"25d4","parentSpanId":"d64f","name":"GET","kind":3,"startTimeUnixNano":"1796158238051643237","endTimeUnixNano":"1796158238091643237","attributes":[{"key":"server.address","value":{"stringValue":"127.0.0.1"}},{"key":"server.port","value":{"intValue":"9000"}},{"key":"http.response.status_code","value":{"intValue":"503"}}],"status":{"code":2}}]}]}]}"#,
        "\n",
        r#"{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"scope":{"name":"x"},"spans":[{"traceId":"ff63","spanId":"d64f","name":"GET /p","kind":2,"startTimeUnixNano":"1796158238051592391","endTimeUnixNano":"1796158238101928596","attributes":[{"key":"http.request.method","value":{"stringValue":"GET"}},{"key":"url.path","value":{"stringValue":"/p/1"}},{"key":"url.query","value":{"stringValue":"a=2"}},{"key":"http.response.status_code","value":{"intValue":"200"}}],"status":{}},{"name":"work","kind":1,"startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}"#,
        "\n",
    );

    /// Each document's line and spans.
    type Read = Vec<(usize, Result<Spans, String>)>;

    fn read(text: &str) -> Result<Read, std::io::Error> {
        let mut docs = Documents::new(text.as_bytes());
        let mut out = Vec::new();
        while let Some(d) = docs.next_document()? {
            out.push((d.line, d.spans));
        }
        Ok(out)
    }

    #[test]
    fn server_spans_are_requests_and_client_spans_are_calls_to_their_peer() {
        let docs = read(EXPORT).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!((docs[0].0, docs[1].0), (1, 2));
        let first = docs[0].1.as_ref().unwrap();
        let Ok(Some(Entry::Call(call))) = &first[0] else {
            panic!("{first:?}")
        };
        assert_eq!(call.peer, "127.0.0.1:9000");
        assert_eq!(call.outcome, CallOutcome::Status(503));
        assert!((call.duration.unwrap() - 0.040).abs() < 1e-9);
        let second = docs[1].1.as_ref().unwrap();
        let Ok(Some(Entry::Request(r))) = &second[0] else {
            panic!("{second:?}")
        };
        assert_eq!((r.method.as_str(), r.target.as_str()), ("GET", "/p/1?a=2"));
        assert_eq!(r.status, Some(200));
        assert!((r.arrival - 1_796_158_238.051_592).abs() < 1e-5);
        assert!(
            matches!(second[1], Ok(None)),
            "an INTERNAL span is passed over"
        );
    }

    #[test]
    fn a_pretty_printed_document_is_read_whole_and_enum_names_are_understood() {
        let doc = r#"
{
  "resourceSpans": [ { "scopeSpans": [ { "spans": [
    { "kind": "SPAN_KIND_CLIENT", "startTimeUnixNano": 1000000000, "endTimeUnixNano": 3000000000,
      "attributes": [ { "key": "peer.service", "value": { "stringValue": "pricing" } },
                      { "key": "error.type", "value": { "stringValue": "TimeoutError" } } ],
      "status": { "code": "STATUS_CODE_ERROR" } },
    { "kind": 3, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
      "attributes": [ { "key": "url.full", "value": { "stringValue": "http://db.local:5432/q" } } ],
      "status": { "code": 2 } }
  ] } ] } ]
}
"#;
        let docs = read(doc).unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(
            docs[0].0, 2,
            "the document begins on its first non-blank line"
        );
        let spans = docs[0].1.as_ref().unwrap();
        let Ok(Some(Entry::Call(timeout))) = &spans[0] else {
            panic!()
        };
        assert_eq!(
            (timeout.peer.as_str(), timeout.outcome),
            ("pricing", CallOutcome::Timeout)
        );
        let Ok(Some(Entry::Call(reset))) = &spans[1] else {
            panic!()
        };
        assert_eq!(
            (reset.peer.as_str(), reset.outcome),
            ("db.local:5432", CallOutcome::Reset)
        );
    }

    #[test]
    fn a_bad_line_is_named_and_the_next_lines_still_read() {
        let text = format!(
            "{}not json\n{}",
            EXPORT,
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":2,"startTimeUnixNano":"5","endTimeUnixNano":"4"}]}]}]}"#
        );
        let docs = read(&text).unwrap();
        assert_eq!(docs.len(), 4);
        assert_eq!(docs[2].0, 3);
        assert!(docs[2].1.as_ref().unwrap_err().contains("not JSON"));
        let last = docs[3].1.as_ref().unwrap();
        let why = last[0].as_ref().unwrap_err();
        assert!(
            why.contains("spans[0]") && why.contains("before it starts"),
            "{why}"
        );
        assert!(read("{\n\"resourceSpans\": [\n}")
            .unwrap_err()
            .to_string()
            .contains("begins on line 1"));
        assert!(spans(&serde_json::json!({"log": 1}))
            .unwrap_err()
            .contains("resourceSpans"));
    }
}
