//! The commands of one connection on their way from the side that reads them to the side that pairs them with
//! their replies, in order.
//!
//! For: handing over the records of a read's commands in one step, bounding how many wait, and telling each
//! side when the other is gone. A side is woken only when it must act: the reply side when a record needs no
//! server bytes (faultd's own error, a hang, a close, the switch to plain forwarding) or the command side left;
//! the command side when there is room again or the reply side left. A forwarded command's record needs no
//! wake: it is in the queue before the command's bytes go to the server, so it is there when its reply comes.
//! Not for: what a record means (`super::conn`).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{mpsc, Notify};

/// Commands waiting for their reply per connection; beyond, faultd stops reading the client (back-pressure).
pub(super) const PENDING: usize = 4096;

#[derive(Debug)]
struct State<T> {
    waiting: VecDeque<T>,
    commands_gone: bool,
    replies_gone: bool,
    /// The command side waits for room.
    room_wanted: bool,
}

/// One connection's queue of pending commands.
#[derive(Debug)]
pub(super) struct Queue<T> {
    state: Mutex<State<T>>,
    /// Wakes the reply side; a wake not taken yet stands for any later ones. A channel rather than a `Notify`:
    /// the reply side waits on it every time it has no reply to read, and a channel's receiver waits without a
    /// lock.
    to_replies: mpsc::Sender<()>,
    to_commands: Notify,
}

/// What the reply side waits on to be woken.
#[derive(Debug)]
pub(super) struct Wakes(mpsc::Receiver<()>);

impl Wakes {
    /// Waits until the command side wakes the reply side (see the module's note on when it does).
    pub(super) async fn woken(&mut self) {
        let _ = self.0.recv().await;
    }
}

/// Why the command side cannot hand over more: the reply side is gone.
#[derive(Debug)]
pub(super) struct RepliesGone;

impl<T> Queue<T> {
    /// An empty queue, and what its reply side waits on.
    pub(super) fn new() -> (Queue<T>, Wakes) {
        let (tx, rx) = mpsc::channel(1);
        let queue = Queue {
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                commands_gone: false,
                replies_gone: false,
                room_wanted: false,
            }),
            to_replies: tx,
            to_commands: Notify::new(),
        };
        (queue, Wakes(rx))
    }

    fn wake_replies(&self) {
        let _ = self.to_replies.try_send(());
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Command side: appends a read's records in order (emptying `batch`), and wakes the reply side when `wake`.
    /// Returns how many wait now. When the reply side is gone, `batch` is left as it was.
    pub(super) fn push(&self, batch: &mut Vec<T>, wake: bool) -> Result<usize, RepliesGone> {
        let mut state = self.state();
        if state.replies_gone {
            return Err(RepliesGone);
        }
        state.waiting.extend(batch.drain(..));
        let n = state.waiting.len();
        drop(state);
        if wake {
            self.wake_replies();
        }
        Ok(n)
    }

    /// Command side: waits until fewer than [`PENDING`] records wait.
    pub(super) async fn room(&self) -> Result<(), RepliesGone> {
        loop {
            {
                let mut state = self.state();
                if state.replies_gone {
                    return Err(RepliesGone);
                }
                if state.waiting.len() < PENDING {
                    return Ok(());
                }
                state.room_wanted = true;
            }
            self.to_commands.notified().await;
        }
    }

    /// Command side: it reads no more commands.
    pub(super) fn commands_gone(&self) {
        self.state().commands_gone = true;
        self.wake_replies();
    }

    /// Reply side: moves every waiting record to the back of `into`; whether the command side is gone.
    pub(super) fn take(&self, into: &mut VecDeque<T>) -> bool {
        let mut state = self.state();
        if into.is_empty() {
            std::mem::swap(&mut state.waiting, into);
        } else {
            into.extend(state.waiting.drain(..));
        }
        let wake = std::mem::take(&mut state.room_wanted);
        let gone = state.commands_gone;
        drop(state);
        if wake {
            self.to_commands.notify_one();
        }
        gone
    }

    /// Reply side: it pairs no more replies; the records still waiting, which will never be answered.
    pub(super) fn replies_gone(&self) -> VecDeque<T> {
        let mut state = self.state();
        state.replies_gone = true;
        let rest = std::mem::take(&mut state.waiting);
        drop(state);
        self.to_commands.notify_one();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_pass_in_order_and_a_gone_side_is_told() {
        let (q, _) = Queue::new();
        let mut batch = vec![1, 2, 3];
        assert_eq!(q.push(&mut batch, false).unwrap(), 3);
        assert!(batch.is_empty());
        let mut into = VecDeque::from([0]);
        assert!(!q.take(&mut into));
        assert_eq!(into, [0, 1, 2, 3]);
        q.push(&mut vec![4], false).unwrap();
        q.commands_gone();
        let mut into = VecDeque::new();
        assert!(q.take(&mut into));
        assert_eq!(into, [4]);
        q.push(&mut vec![5], false).unwrap();
        assert_eq!(q.replies_gone(), [5]);
        let mut batch = vec![6];
        assert!(q.push(&mut batch, true).is_err());
        assert_eq!(
            batch,
            [6],
            "what could not be handed over stays to be counted"
        );
    }

    #[tokio::test]
    async fn a_full_queue_holds_the_command_side_until_replies_take_records() {
        let q = std::sync::Arc::new(Queue::new().0);
        let mut batch: Vec<usize> = (0..PENDING).collect();
        assert_eq!(q.push(&mut batch, false).unwrap(), PENDING);
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.room().await.is_ok() }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        let mut into = VecDeque::new();
        q.take(&mut into);
        assert!(waiter.await.unwrap());
        assert_eq!(into.len(), PENDING);
    }

    #[tokio::test]
    async fn a_wake_reaches_the_reply_side_even_when_it_was_not_waiting_yet() {
        let (q, mut wakes) = Queue::new();
        q.push(&mut vec![1], true).unwrap();
        q.push(&mut vec![2], true).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), wakes.woken())
            .await
            .expect("the wake was kept");
    }
}
