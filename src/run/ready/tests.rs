//! Each kind of readiness against a small server written here (or a shell's output): ready when the SUT offers
//! it, and after the deadline an error naming the kind and what the last attempt saw.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Response};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::Probe;
use crate::run::child::{ChildSut, SutError};
use crate::scenario::Readiness;

/// Starts `script` as a SUT (in `sh -c`) and waits for `readiness` at `url` for at most `timeout`.
async fn wait(
    script: &str,
    readiness: Readiness,
    url: &str,
    timeout: Duration,
) -> Result<(), String> {
    let probe = Probe::new(&readiness, url)?;
    let (tx, _rx) = mpsc::unbounded_channel();
    let argv = ["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
    let mut sut =
        ChildSut::start(&argv, &[], tx, probe.output_watch()).map_err(|e| e.to_string())?;
    let result = sut.wait_ready(&probe, timeout).await;
    sut.stop(Duration::from_secs(2)).await;
    result.map_err(|e| match e {
        SutError::NotReady { reason, .. } => reason,
        other => other.to_string(),
    })
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// An HTTP/2 server answering `grpc.health.v1.Health/Check` with SERVING for `serving` and NOT_SERVING for any
/// other service; returns its base URL.
async fn health_server(serving: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = conn.accept().await {
                    let mut body = request.into_body();
                    let mut message = Vec::new();
                    while let Some(Ok(chunk)) = body.data().await {
                        message.extend_from_slice(&chunk);
                    }
                    // The request is gRPC-framed `HealthCheckRequest { service = 1 }`.
                    let service = message.get(7..).unwrap_or_default();
                    let status = if service == serving.as_bytes() { 1 } else { 2 };
                    let head = Response::builder()
                        .header("content-type", "application/grpc")
                        .body(())
                        .unwrap();
                    let Ok(mut send) = respond.send_response(head, false) else {
                        continue;
                    };
                    let _ = send.send_data(faultd::grpc::frame(&[0x08, status]), false);
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_static("0"));
                    let _ = send.send_trailers(trailers);
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn a_port_that_accepts_a_connection_is_ready() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let ready = wait(
        "exec sleep 30",
        Readiness::Tcp,
        &url,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ready, Ok(()));
}

#[tokio::test]
async fn a_port_that_refuses_is_not_ready_and_the_error_names_the_port_and_the_deadline() {
    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}");
    let reason = wait(
        "exec sleep 30",
        Readiness::Tcp,
        &url,
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert!(
        reason.starts_with(&format!(
            "the SUT's port 127.0.0.1:{port} did not accept a connection within 300ms (last attempt: "
        )),
        "{reason}"
    );
    assert!(reason.to_lowercase().contains("refused"), "{reason}");
}

#[tokio::test]
async fn grpc_health_serving_for_the_named_service_is_ready() {
    let url = health_server("shop.Prices").await;
    let ready = wait(
        "exec sleep 30",
        Readiness::Grpc("shop.Prices".into()),
        &url,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ready, Ok(()));
}

#[tokio::test]
async fn grpc_health_not_serving_is_not_ready_and_the_error_says_not_serving() {
    let url = health_server("shop.Prices").await;
    let reason = wait(
        "exec sleep 30",
        Readiness::Grpc(String::new()),
        &url,
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    let address = url.trim_start_matches("http://");
    assert_eq!(
        reason,
        format!("the SUT's gRPC health check (the server as a whole) at {address} did not answer SERVING within 300ms (last attempt: NOT_SERVING)")
    );
}

#[tokio::test]
async fn grpc_readiness_with_no_server_on_the_port_times_out_naming_the_refusal() {
    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}");
    let reason = wait(
        "exec sleep 30",
        Readiness::Grpc("shop.Prices".into()),
        &url,
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert!(
        reason.starts_with(&format!("the SUT's gRPC health check (service \"shop.Prices\") at 127.0.0.1:{port} did not answer SERVING within 300ms")),
        "{reason}"
    );
    assert!(reason.to_lowercase().contains("refused"), "{reason}");
}

#[tokio::test]
async fn a_matching_output_line_is_ready_even_when_printed_before_the_wait() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    let pattern = regex::Regex::new(r"Serving on \d+").unwrap();
    let script = "echo loading; echo 'Serving on 8080' >&2; exec sleep 30";
    let ready = wait(
        script,
        Readiness::Log(pattern),
        &url,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ready, Ok(()));
}

#[tokio::test]
async fn no_matching_output_line_is_not_ready_and_the_error_names_the_pattern() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    let pattern = regex::Regex::new(r"Serving on \d+").unwrap();
    let reason = wait(
        "echo loading; exec sleep 30",
        Readiness::Log(pattern),
        &url,
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert_eq!(
        reason,
        r"no line of the SUT's output matched `Serving on \d+` within 300ms"
    );
}

#[tokio::test]
async fn an_http_path_answering_2xx_is_ready_and_one_answering_503_is_not() {
    for (status, ready) in [("200 OK", true), ("503 Service Unavailable", false)] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut tcp, _)) = listener.accept().await {
                let mut head = [0u8; 1024];
                let _ = tcp.read(&mut head).await;
                let _ = tcp.write_all(answer.as_bytes()).await;
            }
        });
        let result = wait(
            "exec sleep 30",
            Readiness::Http("/health".into()),
            &url,
            Duration::from_millis(500),
        )
        .await;
        if ready {
            assert_eq!(result, Ok(()));
        } else {
            assert_eq!(
                result.unwrap_err(),
                format!("the SUT was not ready at {url}/health within 500ms (last attempt: answered 503 Service Unavailable)")
            );
        }
    }
}

#[tokio::test]
async fn a_sut_that_exits_before_it_is_ready_fails_with_its_last_output() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    let error = wait(
        "echo 'cannot bind: address in use'; exit 7",
        Readiness::Tcp,
        &url,
        Duration::from_secs(10),
    )
    .await
    .unwrap_err();
    assert!(error.contains("exited before it was ready"), "{error}");
    assert!(error.contains("cannot bind: address in use"), "{error}");
}
