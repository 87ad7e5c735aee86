//! What the TLS listener recorded: handshakes by outcome per time bucket, on the recorder's clock.
//!
//! For: the `tls` field of `/recording` and the `faultd_tls_handshakes` counters of `/metrics`. Not for: calls
//! (the HTTP recorder counts those once the handshake is done). One count per accepted connection, taken once
//! its handshake ends, so a lock per handshake is cheap next to the handshake itself.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use serde::{Deserialize, Serialize};

/// How one connection's handshake ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeOutcome {
    /// Completed with the listener's own certificate (a full handshake).
    Ok,
    /// Completed by resuming an earlier session.
    Resumed,
    /// Refused with a fatal alert (the `failure` fault).
    Alert,
    /// Served an expired certificate (the `expired` fault), whatever the client made of it.
    Expired,
    /// Served a certificate for another name (`wrong_name`).
    WrongName,
    /// Served a certificate from an untrusted issuer (`untrusted`).
    Untrusted,
    /// Completed, then dropped without close_notify (`truncate`).
    Truncated,
    /// The first bytes were not a TLS ClientHello: closed.
    NotTls,
    /// No client certificate, or one the client CA did not sign (mTLS).
    ClientRefused,
    /// Any other failure: the client aborted, no protocol in common, a broken connection.
    Failed,
    /// The client took longer than the handshake timeout.
    TimedOut,
}

impl HandshakeOutcome {
    /// Every outcome, in the order of the recording's keys.
    pub const ALL: [HandshakeOutcome; 11] = [
        HandshakeOutcome::Ok,
        HandshakeOutcome::Resumed,
        HandshakeOutcome::Alert,
        HandshakeOutcome::Expired,
        HandshakeOutcome::WrongName,
        HandshakeOutcome::Untrusted,
        HandshakeOutcome::Truncated,
        HandshakeOutcome::NotTls,
        HandshakeOutcome::ClientRefused,
        HandshakeOutcome::Failed,
        HandshakeOutcome::TimedOut,
    ];

    /// The outcome's name in the recording and the metrics' `outcome` label.
    pub fn name(self) -> &'static str {
        match self {
            HandshakeOutcome::Ok => "ok",
            HandshakeOutcome::Resumed => "resumed",
            HandshakeOutcome::Alert => "alert",
            HandshakeOutcome::Expired => "expired",
            HandshakeOutcome::WrongName => "wrong_name",
            HandshakeOutcome::Untrusted => "untrusted",
            HandshakeOutcome::Truncated => "truncated",
            HandshakeOutcome::NotTls => "not_tls",
            HandshakeOutcome::ClientRefused => "client_refused",
            HandshakeOutcome::Failed => "failed",
            HandshakeOutcome::TimedOut => "timed_out",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

const OUTCOMES: usize = HandshakeOutcome::ALL.len();

/// One bucket of the recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsBucket {
    /// Handshakes that ended in this bucket, by outcome name (outcomes with no handshake are left out).
    pub handshakes: BTreeMap<String, u64>,
    /// Handshakes the `delay` fault held (whatever their outcome).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delayed: u64,
}

impl TlsBucket {
    /// The handshakes that ended with `outcome`.
    pub fn count(&self, outcome: HandshakeOutcome) -> u64 {
        self.handshakes.get(outcome.name()).copied().unwrap_or(0)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The `tls` field of `/recording`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsRecording {
    /// Per bucket from the origin (the recording's `bucket` step).
    pub buckets: Vec<TlsBucket>,
    /// Sums over the run.
    pub totals: TlsBucket,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    outcomes: [u64; OUTCOMES],
    delayed: u64,
}

impl Counts {
    fn bucket(&self) -> TlsBucket {
        TlsBucket {
            handshakes: HandshakeOutcome::ALL
                .iter()
                .zip(self.outcomes)
                .filter(|(_, n)| *n > 0)
                .map(|(o, n)| (o.name().to_string(), n))
                .collect(),
            delayed: self.delayed,
        }
    }
}

/// Counts handshakes per bucket.
#[derive(Debug)]
pub struct TlsRecorder {
    bucket_ns: u64,
    buckets: Mutex<Vec<Counts>>,
}

impl TlsRecorder {
    /// A recorder with this bucket width.
    pub fn new(bucket: Duration) -> TlsRecorder {
        TlsRecorder {
            bucket_ns: (bucket.as_nanos() as u64).max(1),
            buckets: Mutex::new(Vec::new()),
        }
    }

    /// Counts one handshake that ended `t_ns` after the origin.
    pub fn record(&self, t_ns: u64, outcome: HandshakeOutcome, delayed: bool) {
        let i = (t_ns / self.bucket_ns) as usize;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() <= i {
            buckets.resize(i + 1, Counts::default());
        }
        buckets[i].outcomes[outcome.index()] += 1;
        buckets[i].delayed += u64::from(delayed);
    }

    /// Everything so far.
    pub fn snapshot(&self) -> TlsRecording {
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let mut totals = Counts::default();
        for b in buckets.iter() {
            for (t, n) in totals.outcomes.iter_mut().zip(b.outcomes) {
                *t += n;
            }
            totals.delayed += b.delayed;
        }
        TlsRecording {
            buckets: buckets.iter().map(Counts::bucket).collect(),
            totals: totals.bucket(),
        }
    }
}

/// The handshake counters for `/metrics`.
#[derive(Debug)]
pub struct TlsMetrics(pub TlsRecording);

impl prometheus_client::collector::Collector for TlsMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        {
            let mut family = encoder.encode_descriptor(
                "faultd_tls_handshakes",
                "TLS handshakes on the data plane, by outcome",
                None,
                MetricType::Counter,
            )?;
            for o in HandshakeOutcome::ALL {
                let n = self.0.totals.handshakes.get(o.name()).copied().unwrap_or(0);
                ConstCounter::new(n).encode(family.encode_family(&[("outcome", o.name())])?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "faultd_tls_handshakes_delayed",
            "TLS handshakes held by the delay fault",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.0.totals.delayed).encode(family.encode_family(&Vec::<(
            &str,
            &str,
        )>::new(
        ))?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_counted_per_bucket_and_in_total() {
        let r = TlsRecorder::new(Duration::from_millis(100));
        r.record(10_000_000, HandshakeOutcome::Ok, false);
        r.record(250_000_000, HandshakeOutcome::Expired, true);
        r.record(260_000_000, HandshakeOutcome::Expired, false);
        let s = r.snapshot();
        assert_eq!(s.buckets.len(), 3);
        assert_eq!(s.buckets[0].handshakes["ok"], 1);
        assert!(s.buckets[1].handshakes.is_empty());
        assert_eq!(s.buckets[2].handshakes["expired"], 2);
        assert_eq!(s.totals.delayed, 1);
    }
}
