//! One family of samples written into a `/metrics` scrape from a recording's snapshot.
//!
//! For: the collectors that encode figures at scrape time (TCP routes, Redis routes): a family is a name, a help
//! line, a type and its rows of labels and value. Not for: the recorders themselves or what they count.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// One sample: its labels and its value.
pub(crate) type Row<'a> = (Vec<(&'a str, &'a str)>, u64);

/// Writes family `name` of type `kind` (a gauge, or else a counter) with its `rows`.
pub(crate) fn family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: Vec<Row<'_>>,
) -> Result<(), std::fmt::Error> {
    let mut f = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in rows {
        match kind {
            MetricType::Gauge => ConstGauge::new(v as i64).encode(f.encode_family(&labels)?)?,
            _ => ConstCounter::new(v).encode(f.encode_family(&labels)?)?,
        }
    }
    Ok(())
}
