//! serde `with` modules that write histograms as base64 text of their V2+DEFLATE bytes, in the forms faultd's
//! and loadgen's recordings use: one histogram, histograms by name, and optional already-encoded bytes.
//!
//! Not for choosing what to record: each field keeps the histogram its component filled; only the text changes.

/// One `Histogram<u64>` as a base64 string: `#[serde(with = "faultline_hdr::as_base64::histogram")]`.
pub mod histogram {
    use hdrhistogram::Histogram;
    use serde::{de::Error as _, ser::Error as _, Deserialize, Deserializer, Serializer};

    /// Writes `h` as base64 V2+DEFLATE.
    pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::encode_base64(h).map_err(S::Error::custom)?)
    }

    /// Reads base64 V2 or V2+DEFLATE; the error says whether the text or the histogram was wrong.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let text = String::deserialize(d)?;
        crate::decode_base64(&text).map_err(D::Error::custom)
    }
}

/// Histograms by name (a phase, a route) as an object of base64 strings:
/// `#[serde(with = "faultline_hdr::as_base64::histogram_map")]`.
pub mod histogram_map {
    use std::collections::BTreeMap;

    use hdrhistogram::Histogram;
    use serde::{
        de::Error as _, ser::Error as _, Deserialize, Deserializer, Serialize, Serializer,
    };

    /// Writes each histogram as base64 V2+DEFLATE under its name.
    pub fn serialize<S: Serializer>(
        map: &BTreeMap<String, Histogram<u64>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        map.iter()
            .map(|(name, h)| {
                crate::encode_base64(h)
                    .map(|text| (name.as_str(), text))
                    .map_err(|e| S::Error::custom(format!("{name}: {e}")))
            })
            .collect::<Result<BTreeMap<&str, String>, S::Error>>()?
            .serialize(s)
    }

    /// Reads an object of base64 strings; an error names the entry that was wrong.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Histogram<u64>>, D::Error> {
        BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .map(|(name, text)| match crate::decode_base64(&text) {
                Ok(h) => Ok((name, h)),
                Err(e) => Err(D::Error::custom(format!("{name}: {e}"))),
            })
            .collect()
    }
}

/// Optional bytes that are already a V2+DEFLATE encoding (kept encoded to save memory), as a base64 string or
/// null: `#[serde(default, with = "faultline_hdr::as_base64::encoded_option")]`. Decoding checks the base64, not
/// the histogram; [`crate::decode`] does that when the bytes are read.
pub mod encoded_option {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    /// Writes the bytes as base64, or null.
    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(bytes) => s.serialize_some(&crate::encode_bytes(bytes)),
            None => s.serialize_none(),
        }
    }

    /// Reads base64 text, or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| crate::decode_bytes(&text).map_err(D::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hdrhistogram::Histogram;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Recorded {
        #[serde(with = "super::histogram")]
        total: Histogram<u64>,
        #[serde(with = "super::histogram_map")]
        latency: BTreeMap<String, Histogram<u64>>,
        #[serde(default, with = "super::encoded_option")]
        interval: Option<Vec<u8>>,
    }

    fn recorded() -> Recorded {
        let mut h = crate::new_histogram();
        h.record(2_500_000).unwrap();
        Recorded {
            total: h.clone(),
            latency: BTreeMap::from([("brownout".to_string(), h.clone())]),
            interval: Some(crate::encode(&h).unwrap()),
        }
    }

    #[test]
    fn every_form_round_trips_through_json_as_base64_v2_deflate() {
        let json = serde_json::to_value(recorded()).unwrap();
        for text in [
            &json["total"],
            &json["latency"]["brownout"],
            &json["interval"],
        ] {
            assert!(text.as_str().unwrap().starts_with("HISTFAA"), "{json}");
        }
        let back: Recorded = serde_json::from_value(json).unwrap();
        assert_eq!(back, recorded());
    }

    #[test]
    fn a_missing_encoded_option_reads_as_none() {
        let json = serde_json::json!({"total": crate::encode_base64(&crate::new_histogram()).unwrap(), "latency": {}});
        let back: Recorded = serde_json::from_value(json).unwrap();
        assert_eq!(back.interval, None);
    }

    #[test]
    fn a_corrupt_map_entry_is_named_in_the_error() {
        let mut json = serde_json::to_value(recorded()).unwrap();
        json["latency"]["brownout"] = "HISTFAAAAAAA".into();
        let err = serde_json::from_value::<Recorded>(json)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("brownout: not an HDR histogram"), "{err}");
    }
}
