//! The progress line of a long import: bytes read of all the files' total, redrawn at most four times a second on
//! stderr, and only when stderr is a terminal (as the run's live line). Not for counting lines or records: the
//! summary at the end does that.

use std::io::{IsTerminal, Read, Write};
use std::time::{Duration, Instant};

/// How often the line is redrawn at most.
const EVERY: Duration = Duration::from_millis(250);

/// The bytes read so far of `total`.
pub struct Progress {
    total: u64,
    read: u64,
    drawn: Option<Instant>,
    shown: bool,
}

impl Progress {
    /// A line over `total` bytes, drawn when `wanted` and stderr is a terminal.
    pub fn new(total: u64, wanted: bool) -> Progress {
        Progress {
            total,
            read: 0,
            drawn: None,
            shown: wanted && std::io::stderr().is_terminal(),
        }
    }

    fn advance(&mut self, n: usize) {
        self.read += n as u64;
        if !self.shown || self.drawn.is_some_and(|d| d.elapsed() < EVERY) {
            return;
        }
        self.drawn = Some(Instant::now());
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let share = self.read as f64 * 100.0 / self.total.max(1) as f64;
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r\x1b[2Kreading {:.1} of {:.1} MiB ({share:.0}%)",
            mib(self.read),
            mib(self.total)
        );
        let _ = e.flush();
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.shown && self.drawn.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }

    /// `inner`, counted into this line as it is read.
    pub fn wrap<R: Read>(&mut self, inner: R) -> Counted<'_, R> {
        Counted {
            inner,
            progress: self,
        }
    }
}

/// A reader whose bytes advance a progress line.
pub struct Counted<'a, R> {
    inner: R,
    progress: &'a mut Progress,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.advance(n);
        Ok(n)
    }
}
