//! The innermost service of the operations backed by Redis: one command on a connection taken from a
//! deadpool-redis pool (redis-rs multiplexed connections underneath), its answer turned into a [`Reply`].
//!
//! The pool is the connection pool a real service puts in front of its database: at most `pool` connections,
//! opened on demand and kept open, each checked out by one call at a time and checked with a `PING` when it is
//! taken again (deadpool-redis's recycling). The bulkhead in front of it has the same size, so a call never waits
//! for a connection: it is refused by the bulkhead instead, as the HTTP operations are.
//!
//! Not a timeout of any kind: redis-rs's own defaults (1 s to connect, 500 ms per response) are switched off, so
//! the operation's timeout layer is the only one, as with the HTTP client; the `no_timeout` mistake then lets a
//! slow Redis hold every connection of the pool.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, StatusCode};
use bytes::Bytes;
use deadpool_redis::redis::{self, AsyncConnectionConfig};
use deadpool_redis::{Manager, Pool, Runtime};
use tower::Service;

use super::{CallError, DepRequest, Reply};

/// The answer for a key Redis does not hold: an empty cart, which is what a user who added nothing has.
const EMPTY: &[u8] = b"{\"items\":[]}";

/// Sends each [`DepRequest`] as `GET {prefix}:{key}` to one Redis server through a pool of connections.
#[derive(Clone)]
pub struct RedisClient {
    pool: Pool,
    prefix: &'static str,
}

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("status", &self.pool.status())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisClient {
    /// A client of the Redis server at `addr` (`host:port`) with at most `pool` connections, none opened yet;
    /// keys are read under `prefix` (`cart` reads `cart:{id}`).
    pub fn new(addr: &str, pool: usize, prefix: &'static str) -> Result<Self, String> {
        if addr.contains('/') || addr.rsplit_once(':').is_none() {
            return Err(format!("expected host:port, got {addr:?}"));
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let manager = Manager::new_with_config(format!("redis://{addr}/"), config)
            .map_err(|e| e.to_string())?;
        let pool = Pool::builder(manager)
            .max_size(pool)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(RedisClient { pool, prefix })
    }

    /// Connections open now (checked out or idle), as the pool counts them.
    pub fn open(&self) -> usize {
        self.pool.status().size
    }
}

impl Service<DepRequest> for RedisClient {
    type Response = Reply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let pool = self.pool.clone();
        let key = format!("{}:{}", self.prefix, req.key);
        Box::pin(async move {
            let mut conn = pool
                .get()
                .await
                .map_err(|e| CallError::Transport(format!("redis pool: {e}")))?;
            let value: Option<Vec<u8>> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut *conn)
                .await
                .map_err(|e| CallError::Transport(format!("redis: {e}")))?;
            Ok(Reply {
                status: StatusCode::OK,
                body: value.map_or(Bytes::from_static(EMPTY), Bytes::from),
                content_type: Some(HeaderValue::from_static("application/json")),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_must_be_host_and_port() {
        for bad in ["localhost", "redis://127.0.0.1:6379/", ""] {
            assert!(RedisClient::new(bad, 4, "cart").is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_transport_error_and_opens_nothing() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap().to_string();
        drop(free);
        let mut client = RedisClient::new(&addr, 4, "cart").unwrap();
        let req = DepRequest {
            method: axum::http::Method::GET,
            path: "/cart/1".into(),
            body: Bytes::new(),
            key: "1".into(),
            idempotency_key: None,
            context: Default::default(),
        };
        let err = client.call(req).await.unwrap_err();
        assert!(matches!(err, CallError::Transport(_)), "{err:?}");
        assert_eq!(client.open(), 0);
    }
}
