//! The innermost service of the operations backed by Redis: one command on a connection taken from a
//! deadpool-redis pool (redis-rs multiplexed connections underneath), its answer turned into a [`Reply`]. The cart
//! is a list: `cart` reads it (`LRANGE cart:{id} 0 -1`), `cart-write` adds one entry (`RPUSH cart:{id}`), tagged
//! with the request's idempotency key so that an entry applied twice shows as two entries of one request.
//!
//! The pool is the connection pool a real service puts in front of its database: at most `pool` connections,
//! opened on demand and kept open, each checked out by one call at a time and checked with a `PING` when it is
//! taken again (deadpool-redis's recycling). The bulkhead in front of it has the same size, so a call never waits
//! for a connection: it is refused by the bulkhead instead, as the HTTP operations are.
//!
//! A failure says whether the command can have run, because a write Redis cannot de-duplicate may be sent again
//! only when it did not ([`failure`]): `-LOADING` (a restarted server reading its dataset) and a connection that
//! could not be had are [`CallError::NotApplied`]; any other error reply (`-OOM`, `-READONLY`) is
//! [`CallError::Refused`]; a connection lost with the command on it is a transport error, outcome unknown.
//!
//! Not a timeout of any kind: redis-rs's own defaults (1 s to connect, 500 ms per response) are switched off, so
//! the operation's timeout layer is the only one, as with the HTTP client; the `no_timeout` mistake then lets a
//! slow Redis hold every connection of the pool.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, StatusCode};
use bytes::Bytes;
use deadpool_redis::redis::{self, AsyncConnectionConfig, RedisError};
use deadpool_redis::{Manager, Pool, Runtime};
use serde_json::Value;
use tower::Service;

use super::{CallError, DepRequest, Reply};
use crate::operation::Operation;

/// The answer for a cart Redis does not hold: an empty cart, which is what a user who added nothing has.
const EMPTY: &[u8] = b"{\"items\":[]}";

/// The error replies of a server that did not run the command and will soon: loading its dataset after a
/// restart, a cluster slot moving, a replica that lost its primary.
const NOT_APPLIED: [&str; 3] = ["LOADING", "TRYAGAIN", "MASTERDOWN"];

/// What one operation does to the cart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CartCommand {
    /// `LRANGE cart:{id} 0 -1`: the cart's entries, in the order they were added.
    Read,
    /// `RPUSH cart:{id} entry`: one entry added at the end.
    Add,
}

/// Sends each [`DepRequest`] as its operation's command on the cart `cart:{key}` of one Redis server, through a
/// pool of connections.
#[derive(Clone)]
pub struct RedisClient {
    pool: Pool,
    command: CartCommand,
}

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("status", &self.pool.status())
            .field("command", &self.command)
            .finish()
    }
}

impl RedisClient {
    /// A client of the Redis server at `addr` (`host:port`) with at most `pool` connections, none opened yet,
    /// for `op` (`cart-write` adds to the cart, any other operation reads it).
    pub fn new(addr: &str, pool: usize, op: Operation) -> Result<Self, String> {
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
        let command = if op == Operation::CartWrite {
            CartCommand::Add
        } else {
            CartCommand::Read
        };
        Ok(RedisClient { pool, command })
    }

    /// Connections open now (checked out or idle), as the pool counts them.
    pub fn open(&self) -> usize {
        self.pool.status().size
    }
}

/// The [`CallError`] of a command that failed with `e`: whether it can have run decides whether a write may be
/// sent again.
pub fn failure(e: &RedisError) -> CallError {
    // The reply's own words (`-LOADING Redis is loading ...`), as the server wrote them.
    let reply = |code: &str| format!("redis: -{code} {}", e.detail().unwrap_or_default());
    match e.code() {
        Some(code) if NOT_APPLIED.contains(&code) => CallError::NotApplied(reply(code)),
        Some(code) => CallError::Refused(reply(code)),
        None => CallError::Transport(format!("redis: {e}")),
    }
}

/// The entry `cart-write` adds: the request's body (JSON as it is, other text as a string, `{}` when empty) and
/// the request's idempotency key, so that one request's entry found twice is a write applied twice.
pub fn cart_entry(body: &[u8], request: Option<&str>) -> String {
    let item = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    serde_json::json!({ "request": request, "item": item }).to_string()
}

/// The cart page from the list's entries: `{"items": [...]}`, each entry as JSON when it is JSON.
fn cart_page(entries: Vec<Vec<u8>>) -> Bytes {
    if entries.is_empty() {
        return Bytes::from_static(EMPTY);
    }
    let items: Vec<Value> = entries
        .iter()
        .map(|e| {
            serde_json::from_slice(e)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(e).into_owned()))
        })
        .collect();
    Bytes::from(serde_json::json!({ "items": items }).to_string())
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
        let command = self.command;
        let key = format!("cart:{}", req.key);
        Box::pin(async move {
            // No connection, no command sent: nothing can have run.
            let mut conn = pool
                .get()
                .await
                .map_err(|e| CallError::NotApplied(format!("redis pool: {e}")))?;
            let body = match command {
                CartCommand::Read => {
                    let entries: Vec<Vec<u8>> = redis::cmd("LRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .query_async(&mut *conn)
                        .await
                        .map_err(|e| failure(&e))?;
                    cart_page(entries)
                }
                CartCommand::Add => {
                    let entry = cart_entry(&req.body, req.idempotency_key.as_deref());
                    let len: u64 = redis::cmd("RPUSH")
                        .arg(&key)
                        .arg(entry)
                        .query_async(&mut *conn)
                        .await
                        .map_err(|e| failure(&e))?;
                    Bytes::from(format!("{{\"saved\":true,\"items\":{len}}}"))
                }
            };
            Ok(Reply {
                status: StatusCode::OK,
                body,
                content_type: Some(HeaderValue::from_static("application/json")),
            })
        })
    }
}

#[cfg(test)]
#[path = "redis_tests.rs"]
mod tests;
