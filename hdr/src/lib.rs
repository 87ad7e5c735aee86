//! The one HDR histogram codec faultd, loadgen and the runner share: a latency histogram in HdrHistogram's own
//! compressed V2+DEFLATE encoding, as bytes or as base64 text, and the serde helpers that put it in JSON.
//!
//! For: the wire form of a histogram, so that what faultd serves, what loadgen writes and what the runner reads
//! (and HdrHistogram's Java, Go and Python ports too) is one format with one set of settings: nanoseconds, 3
//! significant digits, auto-resizing, standard base64 with padding. Decoding says what was wrong
//! ([`DecodeError`]). Not for: recording (the components own their histograms), percentile text (`.hgrm`,
//! loadgen's `hgrm`) or the interval log (`.hlog`, the runner's reports).
//!
//! ```
//! let mut h = faultline_hdr::new_histogram();
//! h.record(40_000_000).unwrap();
//! let text = faultline_hdr::encode_base64(&h).unwrap();
//! assert!(text.starts_with("HISTFAA")); // the base64 of the V2+DEFLATE cookie
//! assert_eq!(faultline_hdr::decode_base64(&text).unwrap(), h);
//! ```
//!
//! In a serialised struct, pick the helper for the field's form:
//!
//! ```
//! # use std::collections::BTreeMap;
//! # use hdrhistogram::Histogram;
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Served {
//!     #[serde(with = "faultline_hdr::as_base64::histogram")]
//!     total: Histogram<u64>,
//!     #[serde(with = "faultline_hdr::as_base64::histogram_map")]
//!     per_phase: BTreeMap<String, Histogram<u64>>,
//!     #[serde(default, with = "faultline_hdr::as_base64::encoded_option")]
//!     interval: Option<Vec<u8>>,
//! }
//! ```

#![warn(missing_docs)]

use std::io::Cursor;

use base64::Engine;
use hdrhistogram::serialization::{
    DeserializeError, Deserializer, Serializer, V2DeflateSerializeError, V2DeflateSerializer,
};
use hdrhistogram::Histogram;

pub mod as_base64;

/// Significant decimal digits of every histogram: 0.1% resolution at any magnitude.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The first four bytes of a V2+DEFLATE encoding (HdrHistogram's "compressed V2" cookie).
pub const V2_DEFLATE_COOKIE: [u8; 4] = [0x1c, 0x84, 0x93, 0x14];

/// The base64 alphabet and padding of every histogram written as text.
const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A new, empty, auto-resizing histogram of nanoseconds with [`SIGNIFICANT_DIGITS`].
pub fn new_histogram() -> Histogram<u64> {
    // `new` only fails for more than 5 significant digits, and 3 is a constant.
    let mut h = Histogram::new(SIGNIFICANT_DIGITS)
        .unwrap_or_else(|_| unreachable!("3 significant digits is within hdrhistogram's range"));
    h.auto(true);
    h
}

/// Why a histogram could not be encoded. Writing to memory cannot fail for I/O reasons; this is a count too large
/// for the format, which no run reaches.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the histogram as V2+DEFLATE: {0}")]
pub struct EncodeError(#[from] V2DeflateSerializeError);

/// Why bytes or text are not a histogram.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The text is not standard base64.
    #[error("not base64: {0}")]
    NotBase64(#[from] base64::DecodeError),
    /// The bytes are not a V2 or V2+DEFLATE histogram (bad cookie, truncated, corrupt deflate stream, ...).
    #[error("not an HDR histogram: {0}")]
    NotHistogram(#[from] DeserializeError),
}

/// The V2+DEFLATE bytes of `h`, without spare capacity (recordings keep one per bucket for a whole run).
pub fn encode(h: &Histogram<u64>) -> Result<Vec<u8>, EncodeError> {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut bytes)?;
    bytes.shrink_to_fit();
    Ok(bytes)
}

/// The base64 text of `h`'s V2+DEFLATE bytes.
pub fn encode_base64(h: &Histogram<u64>) -> Result<String, EncodeError> {
    encode(h).map(|bytes| BASE64.encode(bytes))
}

/// A histogram from V2 or V2+DEFLATE bytes, auto-resizing so that it can take more samples or merges.
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, DecodeError> {
    let mut h: Histogram<u64> = Deserializer::new().deserialize(&mut Cursor::new(bytes))?;
    h.auto(true);
    Ok(h)
}

/// A histogram from the base64 text of its V2 or V2+DEFLATE bytes.
pub fn decode_base64(text: &str) -> Result<Histogram<u64>, DecodeError> {
    decode(&decode_bytes(text)?)
}

/// Standard base64 text of already encoded bytes.
fn encode_bytes(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// The bytes under standard base64 text, not checked to be a histogram.
fn decode_bytes(text: &str) -> Result<Vec<u8>, DecodeError> {
    Ok(BASE64.decode(text.trim().as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Histogram<u64> {
        let mut h = new_histogram();
        for v in [1_000u64, 40_000_000, 2_000_000_000, 3_000_000_000] {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn a_histogram_survives_bytes_and_base64_round_trips_unchanged() {
        let h = sample();
        assert_eq!(decode(&encode(&h).unwrap()).unwrap(), h);
        let back = decode_base64(&encode_base64(&h).unwrap()).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.len(), 4);
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
    }

    #[test]
    fn encoded_bytes_start_with_the_v2_deflate_cookie() {
        let bytes = encode(&sample()).unwrap();
        assert_eq!(bytes[..4], V2_DEFLATE_COOKIE);
        assert!(encode_base64(&sample()).unwrap().starts_with("HISTFAA"));
    }

    #[test]
    fn decoded_histograms_keep_growing_past_their_encoded_range() {
        let mut h = decode(&encode(&sample()).unwrap()).unwrap();
        h.record(u64::MAX / 4).unwrap();
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn text_that_is_not_base64_is_refused_as_such() {
        let err = decode_base64("HISTFAA not base64 !").unwrap_err();
        assert!(matches!(err, DecodeError::NotBase64(_)), "{err:?}");
        assert!(err.to_string().starts_with("not base64: "), "{err}");
    }

    #[test]
    fn bytes_with_a_foreign_cookie_are_not_a_histogram() {
        let err = decode(b"\x00\x01\x02\x03 these are not HDR bytes").unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::NotHistogram(DeserializeError::InvalidCookie)
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with("not an HDR histogram: "),
            "{err}"
        );
    }

    #[test]
    fn a_truncated_encoding_is_not_a_histogram() {
        let bytes = encode(&sample()).unwrap();
        let err = decode(&bytes[..bytes.len() / 2]).unwrap_err();
        assert!(matches!(err, DecodeError::NotHistogram(_)), "{err:?}");
    }
}
