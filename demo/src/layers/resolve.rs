//! The dependency's name, resolved through one DNS server with a cache: what a service does when its dependency is
//! `http://pricing.internal:9000` rather than an address.
//!
//! For: asking the configured resolver for the name's A records (hickory-proto builds the query and reads the
//! answer; one datagram over a tokio `UdpSocket`, bounded by a timeout), keeping the answer for its TTL, and, when
//! resolution fails (SERVFAIL, NXDOMAIN, no address, no answer in time), serving the last answer for a bounded time
//! (`stale_for`) rather than failing every call: a resolver outage should not become the service's outage. While
//! it serves a stale answer it asks again at most once a [`RETRY_STALE`], and only one caller asks at a time, so a
//! broken resolver is not hammered by every call. Not for: recursion, search domains, AAAA, TCP fallback (a
//! truncated answer counts as a failure) or any name but the one configured.
//!
//! With the mistake `no_dns_cache` every call asks, and a failed resolution fails the call: the service's calls
//! stop the moment the resolver does, and the resolver takes one query per call.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::config::ResolveConfig;

/// While a stale answer is served, the least time between two attempts to refresh it.
pub const RETRY_STALE: Duration = Duration::from_secs(1);

/// Why a name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The server answered with an error code (SERVFAIL, NXDOMAIN, REFUSED, ...).
    #[error("resolving {name}: the server answered {code}")]
    Code {
        /// The name asked for.
        name: String,
        /// The response code, in words.
        code: String,
    },
    /// The server answered without an address (or truncated, which this resolver does not retry over TCP).
    #[error("resolving {name}: the answer held no address")]
    NoAddress {
        /// The name asked for.
        name: String,
    },
    /// No answer came within the timeout.
    #[error("resolving {name}: no answer within {timeout:?}")]
    Timeout {
        /// The name asked for.
        name: String,
        /// How long the query waited.
        timeout: Duration,
    },
    /// The query could not be sent, or the answer not read.
    #[error("resolving {name}: {message}")]
    Io {
        /// The name asked for.
        name: String,
        /// The socket's error.
        message: String,
    },
}

/// A successful answer: the addresses and how long they may be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The A records' addresses, in the answer's order.
    pub addrs: Vec<IpAddr>,
    /// The shortest of their TTLs.
    pub ttl: Duration,
}

/// What the cache holds for the name.
#[derive(Debug, Clone)]
struct Cached {
    addrs: Vec<IpAddr>,
    /// The end of the answer's TTL.
    fresh_until: Instant,
    /// The last moment the answer may be served after a failed refresh.
    stale_until: Instant,
    /// While stale: no new query before this.
    retry_at: Option<Instant>,
}

/// What the cache says for a call at `now`, before any query.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cache {
    /// Serve this (fresh, or stale and not yet time to ask again).
    Serve(IpAddr),
    /// Ask the server; on failure, serve this stale address if there is one.
    Ask(Option<IpAddr>),
}

/// The name's resolver and cache, shared by every call to the dependency.
#[derive(Debug)]
pub struct NameResolver {
    server: SocketAddr,
    name: String,
    stale_for: Duration,
    timeout: Duration,
    /// `no_dns_cache`: ask on every call, never serve an old answer.
    uncached: bool,
    cached: Mutex<Option<Cached>>,
    /// One query at a time: callers that arrive while one is out wait for it and read the cache after.
    asking: tokio::sync::Mutex<()>,
}

impl NameResolver {
    /// A resolver of `name` at `server`, caching unless `uncached`.
    pub fn new(config: &ResolveConfig, name: &str, uncached: bool) -> Result<Self, String> {
        Ok(NameResolver {
            server: config.server()?,
            name: name.trim_end_matches('.').to_ascii_lowercase(),
            stale_for: config.stale_for.get(),
            timeout: config.timeout.get(),
            uncached,
            cached: Mutex::new(None),
            asking: tokio::sync::Mutex::new(()),
        })
    }

    /// The name resolved.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An address of the name for one call: from the cache while its answer is fresh, else from the server; when
    /// the server fails, the last answer while it is within `stale_for` of its TTL's end.
    pub async fn lookup(&self) -> Result<IpAddr, ResolveError> {
        if self.uncached {
            return Ok(self.ask().await?.addrs[0]);
        }
        if let Cache::Serve(ip) = self.consult(Instant::now()) {
            return Ok(ip);
        }
        let _one = self.asking.lock().await;
        // Another caller may have refreshed the cache (or failed and set the retry time) while this one waited.
        let stale = match self.consult(Instant::now()) {
            Cache::Serve(ip) => return Ok(ip),
            Cache::Ask(stale) => stale,
        };
        let result = self.ask().await;
        self.learn(Instant::now(), &result);
        match (result, stale) {
            (Ok(answer), _) => Ok(answer.addrs[0]),
            (Err(_), Some(ip)) => Ok(ip),
            (Err(e), None) => Err(e),
        }
    }

    fn consult(&self, now: Instant) -> Cache {
        let cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = cached.as_ref() else {
            return Cache::Ask(None);
        };
        let ip = c.addrs[0];
        if now < c.fresh_until || c.retry_at.is_some_and(|r| now < r && now <= c.stale_until) {
            return Cache::Serve(ip);
        }
        Cache::Ask((now <= c.stale_until).then_some(ip))
    }

    /// Keeps a new answer, or after a failure the time the stale one may be refreshed again.
    fn learn(&self, now: Instant, result: &Result<Answer, ResolveError>) {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(answer) => {
                let fresh_until = now + answer.ttl;
                *cached = Some(Cached {
                    addrs: answer.addrs.clone(),
                    fresh_until,
                    stale_until: fresh_until + self.stale_for,
                    retry_at: None,
                });
            }
            Err(_) => {
                if let Some(c) = cached.as_mut() {
                    c.retry_at = Some(now + RETRY_STALE);
                }
            }
        }
    }

    /// One query for the name's A records, over UDP from a fresh socket (a new source port and id per query).
    pub async fn ask(&self) -> Result<Answer, ResolveError> {
        let name = &self.name;
        let io = |e: &dyn std::fmt::Display| ResolveError::Io {
            name: name.clone(),
            message: e.to_string(),
        };
        let id: u16 = rand::random();
        let query = query_bytes(name, id).map_err(|e| io(&e))?;
        let local: SocketAddr = match self.server {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let exchange = async {
            let socket = UdpSocket::bind(local).await.map_err(|e| io(&e))?;
            socket.connect(self.server).await.map_err(|e| io(&e))?;
            socket.send(&query).await.map_err(|e| io(&e))?;
            let mut buf = vec![0u8; 4096];
            // A datagram that is not the answer to this query (another id, unreadable) is skipped, as resolvers
            // do against spoofing; the timeout bounds the wait.
            loop {
                let n = socket.recv(&mut buf).await.map_err(|e| io(&e))?;
                if let Some(answer) = read_answer(name, id, &buf[..n]) {
                    return answer;
                }
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(ResolveError::Timeout {
                    name: name.clone(),
                    timeout: self.timeout,
                })
            })
    }
}

/// A recursive query for `name`'s A records with this id.
fn query_bytes(name: &str, id: u16) -> Result<Vec<u8>, String> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.metadata.recursion_desired = true;
    let name = Name::from_ascii(format!("{name}.")).map_err(|e| e.to_string())?;
    m.add_query(Query::query(name, RecordType::A));
    m.to_vec().map_err(|e| e.to_string())
}

/// The answer in `bytes` to query `id`, or `None` if the datagram is not that answer.
fn read_answer(name: &str, id: u16, bytes: &[u8]) -> Option<Result<Answer, ResolveError>> {
    let m = Message::from_vec(bytes).ok()?;
    if m.metadata.id != id {
        return None;
    }
    let code = m.metadata.response_code;
    if code != ResponseCode::NoError {
        return Some(Err(ResolveError::Code {
            name: name.to_string(),
            code: code.to_string(),
        }));
    }
    let mut ttl = u32::MAX;
    let addrs: Vec<IpAddr> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => {
                ttl = ttl.min(r.ttl);
                Some(IpAddr::V4(a.0))
            }
            _ => None,
        })
        .collect();
    if addrs.is_empty() || m.metadata.truncation {
        return Some(Err(ResolveError::NoAddress {
            name: name.to_string(),
        }));
    }
    Some(Ok(Answer {
        addrs,
        ttl: Duration::from_secs(u64::from(ttl)),
    }))
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
