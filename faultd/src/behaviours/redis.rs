//! Redis entries as a field of a behaviour: the `redis:` list of a TCP route with `protocol: redis`, and of a
//! phase naming one. The entries themselves (their fields, checks and triggers) live with the Redis wire in
//! `crate::tcp::protocol::redis::entry`; this file only fits them into the fault list (validation, time scale).

pub use crate::tcp::protocol::redis::{RedisEntry, RedisMatch};
pub use crate::tcp::protocol::{OnGarbage, TcpProtocol};

use super::{Fault, Invalid};

impl Fault for RedisEntry {
    fn validate(&self) -> Result<(), Invalid> {
        RedisEntry::validate(self)
    }

    fn scale_time(&mut self, factor: f64) {
        if let Some(d) = &mut self.delay {
            *d = d.scaled(factor);
        }
    }
}
