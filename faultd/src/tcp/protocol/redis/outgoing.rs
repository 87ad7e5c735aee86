//! The bytes one direction of a Redis connection will write next, in order: what had to be copied first, then a
//! run of the read buffer at hand, left where it lies.
//!
//! For: writing a read's bytes straight from the read buffer when they pass in one run (every command forwarded,
//! every reply passed on: the common case), and copying only when something breaks the run (bytes held over from
//! an earlier read, faultd's own error reply, dropped bytes in between). Not for: deciding what passes.

use std::ops::Range;

/// Bytes to write: `copied`, then `buf[run]` of the read buffer at hand.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    copied: Vec<u8>,
    run: Range<usize>,
}

impl Outgoing {
    /// Adds `buf[range]`: extends the run when it follows it, else copies the run and starts a new one.
    pub(super) fn pass(&mut self, buf: &[u8], range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        if self.run.is_empty() {
            self.run = range;
        } else if self.run.end == range.start {
            self.run.end = range.end;
        } else {
            self.copy_run(buf);
            self.run = range;
        }
    }

    /// Adds bytes that are not in the read buffer.
    pub(super) fn push(&mut self, buf: &[u8], bytes: &[u8]) {
        self.copy_run(buf);
        self.copied.extend_from_slice(bytes);
    }

    /// Copies the run out of the read buffer (before the buffer is read into again).
    pub(super) fn copy_run(&mut self, buf: &[u8]) {
        if !self.run.is_empty() {
            self.copied.extend_from_slice(&buf[self.run.clone()]);
        }
        self.run = 0..0;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.copied.is_empty() && self.run.is_empty()
    }

    /// Everything to write, in order: the run itself when nothing was copied.
    pub(super) fn bytes<'a>(&'a mut self, buf: &'a [u8]) -> &'a [u8] {
        if self.copied.is_empty() {
            return &buf[self.run.clone()];
        }
        self.copy_run(buf);
        &self.copied
    }

    /// Empties it, once written.
    pub(super) fn clear(&mut self) {
        self.copied.clear();
        self.run = 0..0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_stay_in_the_buffer_and_anything_else_keeps_its_place_in_order() {
        let buf = b"abcdefgh";
        let mut out = Outgoing::default();
        out.pass(buf, 0..2);
        out.pass(buf, 2..4);
        assert_eq!(out.bytes(buf), b"abcd");
        assert!(out.copied.is_empty(), "one run is written from the buffer");
        out.pass(buf, 5..6);
        out.push(buf, b"-ERR\r\n");
        out.pass(buf, 7..8);
        out.pass(buf, 8..8);
        assert_eq!(out.bytes(buf), b"abcdf-ERR\r\nh");
        out.clear();
        assert!(out.is_empty());
        out.pass(buf, 1..3);
        out.copy_run(buf);
        assert_eq!(
            out.bytes(b"zzzzzzzz"),
            b"bc",
            "a copied run outlives the buffer"
        );
    }
}
