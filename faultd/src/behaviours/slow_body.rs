//! Slow body: stream the response body at a fixed number of bytes per second.
//!
//! For: dependencies that answer the status line quickly and then trickle the payload, which a client timeout on
//! "time to first byte" never catches. Not for: delaying the whole answer (that is `latency`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use faultline_units::Size;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::time::{Instant, Sleep};

use super::{Fault, Invalid};

/// Streams the body at `rate`, written `slow_body: {rate: 1KiB/s}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlowBody {
    /// Bytes per second, e.g. `1KiB/s`, `500B/s`, `60kB/min`.
    pub rate: ByteRate,
}

impl Fault for SlowBody {
    /// Divides the rate by `factor`: a scenario run ten times faster trickles ten times faster.
    fn scale_time(&mut self, factor: f64) {
        if factor > 0.0 {
            self.rate = ByteRate(self.rate.0 / factor);
        }
    }

    /// Refuses a zero rate (that would be a hang; say `hang` instead).
    fn validate(&self) -> Result<(), Invalid> {
        if self.rate.0 <= 0.0 || !self.rate.0.is_finite() {
            return Err(Invalid::new(
                "rate",
                "must be above zero (use `hang` for a body that never comes)",
            ));
        }
        Ok(())
    }
}

/// A data rate in bytes per second, written with a size and a time unit: `1KiB/s`, `500B/s`, `60kB/min`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct ByteRate(pub f64);

impl ByteRate {
    /// Bytes per second.
    pub fn bytes_per_sec(self) -> f64 {
        self.0
    }
}

/// Why a byte rate could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{input:?} is not a byte rate: {why} (write it like 1KiB/s, 500B/s, 60kB/min)")]
pub struct ByteRateError {
    input: String,
    why: String,
}

impl FromStr for ByteRate {
    type Err = ByteRateError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| ByteRateError {
            input: input.to_string(),
            why: why.to_string(),
        };
        let (size, unit) = input
            .trim()
            .split_once('/')
            .ok_or_else(|| err("it needs a time unit such as /s"))?;
        let size: Size = size
            .trim()
            .parse()
            .map_err(|e: faultline_units::UnitError| err(&e.to_string()))?;
        let seconds = match unit.trim() {
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(err("unknown time unit")),
        };
        Ok(ByteRate(size.bytes() as f64 / seconds))
    }
}

impl fmt::Display for ByteRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}B/s", (self.0 * 1000.0).round() / 1000.0)
    }
}

impl Serialize for ByteRate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for ByteRate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteRate".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "a data rate, e.g. \"1KiB/s\"",
            "pattern": r"^[0-9]+(\.[0-9]+)?(B|b|kB|KB|KiB|MB|MiB|GB|GiB)/(s|sec|m|min|h)$",
        })
    }
}

/// A body that releases its bytes on schedule: byte k is sent once k / rate seconds have passed since the first
/// poll, in chunks of about 10 ms worth of bytes (at least one), so a 1 KiB/s body arrives as ~10-byte chunks.
pub struct TrickleBody {
    body: Bytes,
    rate: f64,
    chunk: usize,
    sent: usize,
    start: Option<Instant>,
    sleep: Pin<Box<Sleep>>,
}

impl TrickleBody {
    /// A body that sends `body` at `rate` bytes per second.
    pub fn new(body: Bytes, rate: ByteRate) -> TrickleBody {
        let chunk = ((rate.0 * 0.010) as usize).max(1);
        TrickleBody {
            body,
            rate: rate.0,
            chunk,
            sent: 0,
            start: None,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
        }
    }

    /// Boxes this body for the data plane's response type.
    pub fn boxed(self) -> super::DataBody {
        self.map_err(|never: std::convert::Infallible| match never {})
            .boxed_unsync()
    }
}

impl Body for TrickleBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.body.is_empty() {
            return Poll::Ready(None);
        }
        let start = *self.start.get_or_insert_with(Instant::now);
        let sent_before = self.sent;
        let n = self.chunk.min(self.body.len());
        let due = start + Duration::from_secs_f64((sent_before + n) as f64 / self.rate);
        if self.sleep.deadline() != due {
            self.sleep.as_mut().reset(due);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                let chunk = self.body.split_to(n);
                self.sent += n;
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.body.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_rates_read_size_and_time_unit() {
        assert_eq!(
            "1KiB/s".parse::<ByteRate>().unwrap().bytes_per_sec(),
            1024.0
        );
        assert_eq!(
            "60kB/min".parse::<ByteRate>().unwrap().bytes_per_sec(),
            1000.0
        );
        for bad in ["1KiB", "5 sec", "1KiB/day", "-1B/s", "fast/s"] {
            assert!(
                bad.parse::<ByteRate>()
                    .unwrap_err()
                    .to_string()
                    .contains("is not a byte rate"),
                "{bad}"
            );
        }
    }

    #[test]
    fn scaling_time_divides_the_rate() {
        let mut slow = SlowBody {
            rate: "1KiB/s".parse().unwrap(),
        };
        slow.scale_time(0.1);
        assert_eq!(slow.rate.bytes_per_sec(), 10240.0);
    }

    #[tokio::test(start_paused = true)]
    async fn trickle_body_delivers_the_last_byte_at_size_over_rate() {
        let start = Instant::now();
        let body = TrickleBody::new(Bytes::from(vec![b'x'; 1000]), ByteRate(500.0));
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(collected.len(), 1000);
        // 1000 bytes at 500 B/s: the last chunk is due at exactly 2 s.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }
}
