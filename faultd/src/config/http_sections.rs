//! The HTTP sections of a configuration: `http2:` (what faultd announces on each HTTP/2 connection) and
//! `unmatched:` (what becomes of a call that matches no route).
//!
//! Not for: serving them (`crate::http` reads them from the plan in force).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::behaviours::proxy::Proxy;
use crate::behaviours::Fault;
use crate::invalid::Invalid;

/// HTTP/2 settings faultd announces on each new connection (a scenario's `http2:` section).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Http2Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: the most streams a caller may hold open on one connection; a caller
    /// that wants more must queue them or open another connection. Unlimited (hyper's default, 200) when absent.
    /// Read when a connection opens, so a change reaches new connections only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_streams: Option<u32>,
}

/// `unmatched: 404` or `unmatched: { proxy: http://127.0.0.1:8080 }` (also `{ proxy: { url, ca } }`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "404, or `{ proxy: URL }` to forward the calls that match no route"
)]
pub enum Unmatched {
    /// Answer 404, the default: the only status allowed.
    Status(u16),
    /// Forward to this upstream, as a route's `proxy` does.
    Forward(Forward),
}

/// `{ proxy: URL }`: where calls that match no route go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Forward {
    /// The upstream every unmatched call goes to, its path and query appended.
    pub proxy: Proxy,
}

impl Unmatched {
    /// The upstream unmatched calls go to, if any.
    pub fn proxy(&self) -> Option<&Proxy> {
        match self {
            Unmatched::Status(_) => None,
            Unmatched::Forward(f) => Some(&f.proxy),
        }
    }

    /// A status other than 404, or an upstream that is not a URL faultd can forward to, is refused.
    pub fn validate(&self) -> Result<(), Invalid> {
        match self {
            Unmatched::Status(404) => Ok(()),
            Unmatched::Status(other) => Err(Invalid::new(
                "",
                format!(
                    "{other}: give 404 (the default) or `{{ proxy: URL }}` to forward calls that match no route"
                ),
            )),
            Unmatched::Forward(f) => f.proxy.validate().map_err(|e| e.at("proxy")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_hundred_four_and_a_proxy_are_read_and_anything_else_refused() {
        let read = |yaml: &str| serde_saphyr::from_str::<Unmatched>(yaml).unwrap();
        assert_eq!(read("404"), Unmatched::Status(404));
        assert!(read("404").validate().is_ok());
        assert_eq!(read("404").proxy(), None);
        let forward = read("{ proxy: http://127.0.0.1:8080 }");
        assert_eq!(
            forward.proxy(),
            Some(&Proxy::Url("http://127.0.0.1:8080".into()))
        );
        assert!(forward.validate().is_ok());
        let e = read("500").validate().unwrap_err();
        assert!(e.message.contains("give 404"), "{}", e.message);
        let e = read("{ proxy: ftp://127.0.0.1 }").validate().unwrap_err();
        assert_eq!(e.field, "proxy");
        assert!(serde_saphyr::from_str::<Unmatched>("{ proxy: http://x, other: 1 }").is_err());
    }
}
