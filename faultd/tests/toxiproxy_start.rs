//! faultd where Toxiproxy stands in containers, started as a binary: a proxy made through the stock
//! toxiproxy-python client listens on every interface only when faultd was started with `--allow-listen 0.0.0.0`
//! (and is refused, saying why, without it); proxies and their toxics given in a file at start (`--toxics`) are in
//! force from their first connection. Every connection the tests make goes to 127.0.0.1.

use crate::servers::{self, Server};
use crate::tcp;
use crate::toxiproxy_clients::{python_with_the_client, scripts};

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// faultd started with `args(port)`, ready once 127.0.0.1:`port` (its Toxiproxy API) accepts.
fn started(name: &str, args: impl Fn(u16) -> Vec<String>) -> Server {
    servers::start(
        name,
        Duration::from_secs(20),
        None,
        |port, _| {
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_faultd"));
            c.args(args(port));
            c
        },
        |port| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    )
}

/// Waits up to 10 s for faultd's output to hold `text` (it says what it loaded after its API accepts), and
/// returns the output.
fn said(f: &Server, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = f.log();
        if log.contains(text) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "faultd never said {text:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// faultd with its Toxiproxy API on a free loopback port and `extra` flags.
fn faultd(name: &str, extra: &[&str]) -> Server {
    started(name, |port| {
        [
            "--listen",
            "127.0.0.1:0",
            "--toxiproxy-api",
            &format!("127.0.0.1:{port}"),
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
    })
}

#[tokio::test]
async fn toxiproxy_python_makes_a_proxy_on_every_interface_only_where_faultd_allows_it() {
    let python = python_with_the_client().await;
    let echo = tcp::Echo::start().await;
    for (allowed, extra) in [("yes", &["--allow-listen", "0.0.0.0"][..]), ("no", &[][..])] {
        let f = faultd("toxiproxy-any", extra);
        let out = Command::new(&python)
            .arg(scripts().join("test_python_any_address.py"))
            .env("FAULTD_TOXIPROXY", format!("127.0.0.1:{}", f.port))
            .env("ECHO_UPSTREAM", echo.addr.to_string())
            .env("PROXY_PORT", servers::free_port().to_string())
            .env("ALLOWED", allowed)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out)
            .await
            .expect("the client finishes within 60 s")
            .expect("the client starts");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("ok: done"),
            "allowed: {allowed}:\n{text}\nfaultd:\n{}",
            f.log()
        );
        // faultd says at start what listens beyond loopback (by now: the client has come and gone).
        let log = said(&f, "faultd: Toxiproxy API on");
        let beyond = log.contains(
            "listening beyond loopback, reachable from other machines: proxies allowed on 0.0.0.0",
        );
        assert_eq!(beyond, allowed == "yes", "{log}");
    }
}

/// Seconds for one echo over a fresh connection to 127.0.0.1:`port`; `None` while nothing listens there.
async fn round_trip(port: u16) -> Option<f64> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let start = Instant::now();
    s.write_all(b"PING").await.ok()?;
    let mut got = [0u8; 4];
    s.read_exact(&mut got).await.ok()?;
    assert_eq!(&got, b"PING");
    Some(start.elapsed().as_secs_f64())
}

#[tokio::test]
async fn proxies_and_toxics_from_a_file_are_in_force_from_the_first_connection() {
    let echo = tcp::Echo::start().await;
    let port = servers::free_port();
    let dir = servers::temp_dir("toxics-file", port);
    let file = dir.join("toxics.json");
    std::fs::write(
        &file,
        serde_json::json!([
            { "name": "cache", "listen": format!("127.0.0.1:{port}"), "upstream": echo.addr.to_string(),
              "toxics": [ { "type": "latency", "attributes": { "latency": 300 } } ] },
            { "name": "spare", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string(), "enabled": false }
        ])
        .to_string(),
    )
    .unwrap();
    let f = faultd("toxics-file", &["--toxics", file.to_str().unwrap()]);
    // The first connection that the proxy takes already carries its toxic.
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        if let Some(t) = round_trip(port).await {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy never listened:\n{}",
            f.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        first >= 0.3,
        "the first round trip took {first} s:\n{}",
        f.log()
    );
    said(
        &f,
        &format!(
            "faultd: proxy cache on 127.0.0.1:{port} -> {} (1 toxic)",
            echo.addr
        ),
    );
    let log = said(&f, "faultd: proxy spare on 127.0.0.1:");
    assert!(log.contains("(0 toxics, disabled)"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_toxics_file_that_names_an_unknown_toxic_stops_faultd_saying_where() {
    let dir = servers::temp_dir("toxics-bad", servers::free_port());
    let file = dir.join("toxics.json");
    std::fs::write(
        &file,
        r#"[ { "name": "cache", "upstream": "127.0.0.1:6379", "toxics": [ { "type": "latenzy" } ] } ]"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_faultd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--toxiproxy-api",
            "127.0.0.1:0",
            "--toxics",
        ])
        .arg(&file)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("faultd stops within 30 s")
        .expect("faultd starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "toxics.json: proxies[0] (\"cache\"), toxics[0]: invalid toxic type: \"latenzy\""
        ),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_images_toxiproxy_stage_and_the_compose_example_start_faultd_as_they_say() {
    // No container runtime runs here: faultd is started with the flags each file gives it, the API moved from
    // 0.0.0.0:8474 to a free loopback port and the toxics file's port to a free one.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let containerfile = read("Containerfile");
    let entrypoint = containerfile
        .split("\nFROM ")
        .find(|stage| stage.starts_with("base AS toxiproxy"))
        .and_then(|stage| stage.lines().find_map(|l| l.strip_prefix("ENTRYPOINT ")))
        .expect("a toxiproxy stage with an ENTRYPOINT");
    let entrypoint: Vec<String> = serde_json::from_str(entrypoint).unwrap();
    assert_eq!(entrypoint[0], "faultd");
    let compose: serde_json::Value =
        serde_saphyr::from_str(&read("docs/compose.toxiproxy.yaml")).unwrap();
    let service = &compose["services"]["toxiproxy"];
    assert_eq!(service["entrypoint"], serde_json::json!(["faultd"]));
    let mut command: Vec<String> = serde_json::from_value(service["command"].clone()).unwrap();
    let port = servers::free_port();
    let dir = servers::temp_dir("toxics-compose", port);
    let toxics =
        read("docs/compose.toxics.json").replace("0.0.0.0:26379", &format!("0.0.0.0:{port}"));
    std::fs::write(dir.join("toxics.json"), toxics).unwrap();
    for arg in command
        .iter_mut()
        .filter(|a| *a == "/etc/faultd/toxics.json")
    {
        *arg = dir.join("toxics.json").display().to_string();
    }
    let moved = |args: &[String], api: u16| -> Vec<String> {
        let mut args: Vec<String> = args
            .iter()
            .map(|a| a.replace("0.0.0.0:8474", &format!("127.0.0.1:{api}")))
            .collect();
        args.extend(["--listen".into(), "127.0.0.1:0".into()]);
        args
    };
    let image = started("toxiproxy-image", |api| moved(&entrypoint[1..], api));
    said(
        &image,
        &format!("faultd: Toxiproxy API on http://127.0.0.1:{}", image.port),
    );
    said(&image, "proxies allowed on 0.0.0.0 (--allow-listen)");
    drop(image);
    let composed = started("toxiproxy-compose", |api| moved(&command, api));
    said(
        &composed,
        &format!("faultd: proxy cache on 0.0.0.0:{port} -> redis:6379 (1 toxic)"),
    );
    drop(composed);
    let _ = std::fs::remove_dir_all(&dir);
}
