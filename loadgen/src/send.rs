//! The sending: one HTTP exchange per request over keep-alive HTTP/1.1, read to the end of the body.
//!
//! The hot path is hyper-util's legacy client over hyper 1 (no reqwest): the lead measured it at ~25-35% less
//! CPU per request than reqwest on this machine, and oha makes the same choice. The client creates connections on
//! demand and keeps up to `connections` idle; the cap on connections in use is the dispatcher's slot semaphore,
//! which is also where "actual send" is stamped (the legacy client does not say when a request got a connection).
//!
//! Not for timing, timeouts or outcomes: the dispatcher does those, so that the same logic runs against the mock
//! transport of the deterministic tests.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::http::response::Parts;
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A request that could not complete: the connection failed or broke. Timeouts are the dispatcher's.
#[derive(Debug)]
pub(crate) struct TransportError(#[allow(dead_code)] pub(crate) String);

/// Something that performs one HTTP exchange and returns the response head once the body has been read.
pub(crate) trait Transport: Send + Sync + 'static {
    fn exchange(
        &self,
        request: Request<Full<Bytes>>,
    ) -> impl Future<Output = Result<Parts, TransportError>> + Send;
}

/// The real transport: hyper-util's pooled HTTP/1.1 client.
pub(crate) struct HyperTransport {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl HyperTransport {
    /// A client that keeps up to `connections` idle keep-alive connections, with Nagle off (small requests must
    /// leave at once, or the send time lies by up to 40 ms).
    pub(crate) fn new(connections: u32) -> HyperTransport {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(connections as usize)
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        HyperTransport { client }
    }
}

impl Transport for HyperTransport {
    fn exchange(
        &self,
        request: Request<Full<Bytes>>,
    ) -> impl Future<Output = Result<Parts, TransportError>> + Send {
        let response = self.client.request(request);
        async move {
            let response = response
                .await
                .map_err(|e| TransportError(format!("{e:?}")))?;
            let (parts, mut body) = response.into_parts();
            // Read the body to its end without keeping it: the exchange is over, and the connection can be reused,
            // only once the last byte is in.
            while let Some(frame) = body.frame().await {
                frame.map_err(|e| TransportError(e.to_string()))?;
            }
            Ok(parts)
        }
    }
}
