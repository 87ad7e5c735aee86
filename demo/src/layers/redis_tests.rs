//! The Redis client against a scripted server on loopback that speaks just enough RESP: what each cart command
//! sends, and which failure each error reply becomes.

use super::*;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

fn request(key: &str, body: &'static [u8], idempotency_key: Option<&str>) -> DepRequest {
    DepRequest {
        method: axum::http::Method::POST,
        path: format!("/cart/{key}"),
        body: Bytes::from_static(body),
        key: key.into(),
        idempotency_key: idempotency_key.map(str::to_string),
        context: Default::default(),
    }
}

/// Reads one command (an array of bulk strings); `None` when the client left.
async fn read_command(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> Option<Vec<String>> {
    let mut line = String::new();
    reader.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut words = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        reader.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut word = vec![0u8; len + 2];
        tokio::io::AsyncReadExt::read_exact(reader, &mut word)
            .await
            .ok()?;
        word.truncate(len);
        words.push(String::from_utf8_lossy(&word).into_owned());
    }
    Some(words)
}

/// A server that answers `reply` to every RPUSH and LRANGE, `+OK` to anything else, and keeps the commands it
/// was sent.
async fn scripted(reply: &'static str) -> (String, Arc<Mutex<Vec<Vec<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut reader = BufReader::new(read);
                while let Some(words) = read_command(&mut reader).await {
                    let name = words.first().map(|w| w.to_ascii_uppercase());
                    let answer = match name.as_deref() {
                        Some("RPUSH" | "LRANGE") => reply,
                        _ => "+OK\r\n",
                    };
                    log.lock().unwrap().push(words);
                    if write.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[test]
fn an_address_must_be_host_and_port() {
    for bad in ["localhost", "redis://127.0.0.1:6379/", ""] {
        assert!(RedisClient::new(bad, 4, Operation::Cart).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn a_refused_connection_was_not_applied_and_opens_nothing() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    let mut client = RedisClient::new(&addr, 4, Operation::CartWrite).unwrap();
    let err = client.call(request("1", b"", None)).await.unwrap_err();
    assert!(matches!(err, CallError::NotApplied(_)), "{err:?}");
    assert_eq!(client.open(), 0);
}

#[tokio::test]
async fn adding_pushes_one_entry_tagged_with_the_request_and_answers_the_new_length() {
    let (addr, seen) = scripted(":3\r\n").await;
    let mut client = RedisClient::new(&addr, 2, Operation::CartWrite).unwrap();
    let reply = client
        .call(request("7", br#"{"sku":"A-1"}"#, Some("demo-1-0-5")))
        .await
        .unwrap();
    assert_eq!(
        reply.body,
        Bytes::from_static(br#"{"saved":true,"items":3}"#)
    );
    let seen = seen.lock().unwrap();
    let push = seen.iter().find(|c| c[0] == "RPUSH").expect("an RPUSH");
    assert_eq!(push[1], "cart:7");
    let entry: Value = serde_json::from_str(&push[2]).unwrap();
    assert_eq!(
        entry,
        serde_json::json!({"request": "demo-1-0-5", "item": {"sku": "A-1"}})
    );
}

#[tokio::test]
async fn reading_lists_the_cart_and_an_unknown_cart_is_empty() {
    let (addr, _) = scripted("*2\r\n$11\r\n{\"item\":42}\r\n$5\r\nplain\r\n").await;
    let mut client = RedisClient::new(&addr, 2, Operation::Cart).unwrap();
    let reply = client.call(request("7", b"", None)).await.unwrap();
    assert_eq!(
        reply.body,
        Bytes::from_static(br#"{"items":[{"item":42},"plain"]}"#)
    );
    let (addr, _) = scripted("*0\r\n").await;
    let mut client = RedisClient::new(&addr, 2, Operation::Cart).unwrap();
    let reply = client.call(request("8", b"", None)).await.unwrap();
    assert_eq!(reply.body, Bytes::from_static(EMPTY));
}

#[tokio::test]
async fn loading_was_not_applied_and_oom_or_readonly_is_a_refusal() {
    type Expected = fn(&CallError) -> bool;
    let cases: [(&'static str, Expected); 3] = [
        (
            "-LOADING Redis is loading the dataset in memory\r\n",
            |e| matches!(e, CallError::NotApplied(m) if m.contains("LOADING")),
        ),
        (
            "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
            |e| matches!(e, CallError::Refused(m) if m.contains("OOM")),
        ),
        (
            "-READONLY You can't write against a read only replica.\r\n",
            |e| matches!(e, CallError::Refused(_)),
        ),
    ];
    for (reply, expected) in cases {
        let (addr, _) = scripted(reply).await;
        let mut client = RedisClient::new(&addr, 2, Operation::CartWrite).unwrap();
        let err = client.call(request("1", b"", Some("k"))).await.unwrap_err();
        assert!(expected(&err), "{reply}: {err:?}");
        assert_eq!(err.is_retryable(), reply.starts_with("-LOADING"), "{reply}");
    }
}

#[test]
fn an_entry_keeps_json_as_it_is_and_other_text_as_a_string() {
    assert_eq!(cart_entry(b"", Some("k")), r#"{"item":{},"request":"k"}"#);
    assert_eq!(
        cart_entry(b"socks", None),
        r#"{"item":"socks","request":null}"#
    );
    assert_eq!(
        cart_entry(br#"[1, 2]"#, Some("k")),
        r#"{"item":[1,2],"request":"k"}"#
    );
}
