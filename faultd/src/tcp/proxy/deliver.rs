//! One chunk's delivery under the plan its toxics gave it: the delay from its arrival, the bandwidth's pace, the
//! slicer's slices, the limit. For: ending each of those waits when the toxics change, so that a removed toxic
//! stops acting within the wait it is in. Not for: reading, queueing, or choosing the plan (see the parent).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};

use super::super::toxics::{ChunkPlan, ChunkRng, Ending, Stream};
use super::super::Toxic;
use super::ConnCtx;

/// How the delivery of one chunk ended.
pub(super) enum Delivery {
    /// Every byte of it was written.
    Done,
    /// The connection must stop: a write failed, or a limit was hit.
    Stop,
    /// The toxics changed while these bytes waited (a delay, a bandwidth pause, a slicer's pause): they go out
    /// under the new set. A removed toxic thus stops acting within the wait it was in, not at the end of a chunk
    /// that a slow rate can stretch over tens of seconds.
    Replan(Bytes),
}

/// Waits for `wait`, unless the toxics change first: true when the wait ran to its end.
async fn waited(
    wait: impl Future<Output = ()>,
    toxics: &mut watch::Receiver<Arc<Vec<Toxic>>>,
) -> bool {
    tokio::select! {
        biased;
        // A change, or the route's toxics gone with the route: either way the plan no longer holds.
        _ = toxics.changed() => false,
        () = wait => true,
    }
}

/// Writes one chunk as its plan says, for as long as the toxics stay as they were when it was planned.
#[allow(clippy::too_many_arguments)]
pub(super) async fn deliver(
    ctx: &ConnCtx,
    stream: Stream,
    arrived: Instant,
    mut chunk: Bytes,
    plan: &ChunkPlan,
    rng: &mut ChunkRng,
    sent: &mut u64,
    dst: &mut OwnedWriteHalf,
    toxics: &mut watch::Receiver<Arc<Vec<Toxic>>>,
) -> Delivery {
    if !plan.delay.is_zero() {
        let due = arrived + plan.delay;
        let held = match &ctx.shared.deadlines {
            Some(deadlines) => waited(deadlines.wait_until(due), toxics).await,
            None => waited(sleep_until(due), toxics).await,
        };
        if !held {
            return Delivery::Replan(chunk);
        }
    }
    // The bytes past a limit are dropped only when the limit is reached; until then they stay with the chunk, so
    // a limit removed before that goes on to deliver them.
    let mut over_limit: Option<Bytes> = None;
    if let Some(limit) = plan.limit {
        let room = limit.saturating_sub(*sent);
        if chunk.len() as u64 >= room {
            over_limit = Some(chunk.split_off(room as usize));
        }
    }
    let replan = |chunk: Bytes, over: Option<Bytes>| match over {
        Some(over) if !over.is_empty() => {
            let mut whole = bytes::BytesMut::with_capacity(chunk.len() + over.len());
            whole.extend_from_slice(&chunk);
            whole.extend_from_slice(&over);
            Delivery::Replan(whole.freeze())
        }
        _ => Delivery::Replan(chunk),
    };
    while !chunk.is_empty() {
        let size = match (plan.slices, plan.bytes_per_second) {
            (Some(s), _) => {
                let size = s.average as i64 + rng.symmetric(s.variation);
                size.max(1) as usize
            }
            // A tenth of a second's worth at a time, so a slow rate is smooth rather than bursty.
            (None, Some(bps)) => ((bps / 10.0) as usize).max(1),
            (None, None) => chunk.len(),
        };
        let size = size.min(chunk.len());
        if let Some(bps) = plan.bytes_per_second {
            let pace = sleep(Duration::from_secs_f64(size as f64 / bps));
            if !waited(pace, toxics).await {
                return replan(chunk, over_limit);
            }
        }
        let piece = chunk.split_to(size);
        if dst.write_all(&piece).await.is_err() {
            ctx.finish(Ending::Close);
            return Delivery::Stop;
        }
        *sent += piece.len() as u64;
        ctx.shared.recorder.bytes(stream, piece.len());
        if let Some(s) = plan.slices {
            if !s.pause.is_zero() && !chunk.is_empty() && !waited(sleep(s.pause), toxics).await {
                return replan(chunk, over_limit);
            }
        }
    }
    if over_limit.is_some() {
        let _ = dst.flush().await;
        ctx.finish(Ending::Close);
        return Delivery::Stop;
    }
    Delivery::Done
}
