//! The floor under faultd's healthy-route benchmark (`bench/faultd/run.sh a`): what a server on the same runtime
//! as faultd's there (tokio's single-threaded one) costs when it does nothing but parse each request head with
//! httparse and answer the same bytes as the benchmark's route (`{"ok":true}`, application/json, keep-alive, a
//! date header). No routing, no recorder, no hyper: the distance from nginx to this server is the runtime's and
//! the kernel's, the distance from this server to faultd is everything faultd does per call.
//!
//! Usage: `bench-floor 127.0.0.1:PORT`. `GET /count` answers how many other requests it has answered so far,
//! so the benchmark counts requests at the server, as it does for nginx and faultd. Loopback addresses only.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use tokio::net::TcpStream;

const BODY: &[u8] = b"{\"ok\":true}";

/// Requests answered with [`BODY`] so far.
static SERVED: AtomicU64 = AtomicU64::new(0);

/// The date header, formatted again only when the second changes, as hyper caches it.
struct Date {
    second: u64,
    text: String,
}

impl Date {
    fn now(&mut self) -> &str {
        let now = SystemTime::now();
        let second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if second != self.second || self.text.is_empty() {
            self.second = second;
            self.text = httpdate::fmt_http_date(now);
        }
        &self.text
    }
}

/// Appends one answer to `out`: the fixed body, or the count for `GET /count`.
fn answer(out: &mut Vec<u8>, path: &str, date: &mut Date) {
    let counted;
    let body = if path == "/count" {
        counted = format!("{}\n", SERVED.load(Ordering::Relaxed));
        counted.as_bytes()
    } else {
        SERVED.fetch_add(1, Ordering::Relaxed);
        BODY
    };
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ");
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{}", body.len());
    out.extend_from_slice(b"\r\ndate: ");
    out.extend_from_slice(date.now().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// Serves one connection: reads, answers every complete request head in what was read (pipelined ones too), writes
/// the answers in one write, until the caller closes. A request with a body or a head it cannot parse closes it:
/// the benchmark sends neither.
async fn serve(tcp: TcpStream) -> io::Result<()> {
    tcp.set_nodelay(true)?;
    let mut date = Date {
        second: 0,
        text: String::new(),
    };
    let mut buf = vec![0u8; 8192];
    let mut have = 0;
    let mut out = Vec::with_capacity(4096);
    loop {
        if have == buf.len() {
            return Ok(()); // a head larger than 8 KiB
        }
        tcp.readable().await?;
        match tcp.try_read(&mut buf[have..]) {
            Ok(0) => return Ok(()),
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        let mut parsed = 0;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(&buf[parsed..have]) {
                Ok(httparse::Status::Complete(len)) => {
                    let has_body = request.headers.iter().any(|h| {
                        h.name.eq_ignore_ascii_case("transfer-encoding")
                            || (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0")
                    });
                    if has_body {
                        return Ok(());
                    }
                    answer(&mut out, request.path.unwrap_or("/"), &mut date);
                    parsed += len;
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => return Ok(()),
            }
        }
        buf.copy_within(parsed..have, 0);
        have -= parsed;
        let mut written = 0;
        while written < out.len() {
            tcp.writable().await?;
            match tcp.try_write(&out[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        out.clear();
    }
}

/// One thread, as faultd runs with one worker in the benchmark (a single-threaded runtime).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let addr = bench_floor::loopback(
        std::env::args().nth(1),
        "listen",
        "bench-floor 127.0.0.1:PORT",
    )
    .map_err(|e| format!("bench-floor: {e}"))?;
    let listener = bench_floor::listen(addr).map_err(|e| format!("bench-floor: {e}"))?;
    bench_floor::serve_each("bench-floor", listener, serve).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Two pipelined requests are answered in order with the fixed body, and `/count` then says two; a request with
    /// a body closes the connection unanswered.
    #[tokio::test]
    async fn answers_pipelined_requests_and_counts_them() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(serve(tcp));
            }
        });
        let mut caller = TcpStream::connect(addr).await.unwrap();
        caller
            .write_all(b"GET /ok HTTP/1.1\r\nhost: a\r\n\r\nGET /ok HTTP/1.1\r\nhost: a\r\n\r\nGET /count HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        // The third answer is the count, the last bytes of all: "2\n" after its head.
        let mut got = Vec::new();
        let mut chunk = [0u8; 1024];
        while !got.ends_with(b"\r\n\r\n2\n") {
            let n = caller.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8(got).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 3, "{text}");
        assert_eq!(text.matches("content-length: 11\r\n").count(), 2, "{text}");
        assert_eq!(text.matches("\r\n\r\n{\"ok\":true}").count(), 2, "{text}");
        assert_eq!(text.matches("\r\ndate: ").count(), 3, "{text}");

        let mut with_body = TcpStream::connect(addr).await.unwrap();
        with_body
            .write_all(b"POST /ok HTTP/1.1\r\ncontent-length: 2\r\n\r\nhi")
            .await
            .unwrap();
        let mut rest = Vec::new();
        with_body.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
}
