//! Ctrl-C and SIGTERM for the length of a run: caught from the moment the run starts, so that a signal stops the
//! load, returns faultd to healthy and still leaves a report, instead of killing the process and orphaning a SUT.
//!
//! Not for what the run does on a signal; only for hearing it.

/// Ctrl-C and SIGTERM, listened for from the moment this is created (the process-wide handlers are installed at
/// once, so a signal that arrives before anyone awaits `recv` is kept, not fatal).
pub struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers. Must be called inside a tokio runtime.
    pub fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// Resolves on the next Ctrl-C or SIGTERM, with the signal's name.
    pub async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                let received = match s {
                    Some(s) => s.recv().await.is_some(),
                    None => false,
                };
                if !received {
                    // No handler (or the driver is gone): never resolve rather than spin.
                    std::future::pending::<()>().await;
                }
            }
            tokio::select! {
                _ = next(&mut self.interrupt) => "SIGINT",
                _ = next(&mut self.terminate) => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

impl Default for Signals {
    fn default() -> Signals {
        Signals::new()
    }
}
