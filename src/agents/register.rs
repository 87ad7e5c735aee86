//! Gathering the agents: the listener they dial, the local agent processes of `--agents N`, each agent's hello
//! and index, and its clock offset. An agent's wall clock is compared with the runner's by a few ping exchanges
//! at registration (NTP's estimate: the agent's time minus the midpoint of the exchange, within half its round
//! trip; the shortest of the exchanges wins), so that t = 0 can be sent to each agent on its own clock.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use loadgen::agent::protocol::{self, ToAgent, ToRunner, WireError};
use tokio::io::BufReader;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::{AgentsError, AgentsOptions, MAX_AGENTS};

/// Ping exchanges per agent; the one with the shortest round trip gives the offset.
const PINGS: u32 = 8;

/// How long a new connection may take to say hello.
const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// One registered agent, its connection and its clock.
pub(crate) struct Agent {
    pub(crate) index: u32,
    pub(crate) host: String,
    /// Its wall clock minus the runner's, in nanoseconds.
    pub(crate) offset_ns: i64,
    /// Half the round trip of the exchange that gave the offset.
    pub(crate) uncertainty_ns: u64,
    pub(crate) reader: BufReader<OwnedReadHalf>,
    pub(crate) writer: OwnedWriteHalf,
}

/// Every agent of a run, registered and with its clock measured, before t = 0 is fixed.
pub struct Registered {
    pub(crate) agents: Vec<Agent>,
    /// The local agent processes (killed if the runner goes away without waiting for them).
    pub(crate) children: Vec<tokio::process::Child>,
}

impl Registered {
    /// How many agents registered.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// Whether none did (never, once registration succeeded).
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }
}

/// Listens, starts the local agents if asked to, and waits until every agent has registered and had its clock
/// measured.
pub async fn register(options: &AgentsOptions) -> Result<Registered, AgentsError> {
    let n = options.count;
    if n == 0 || n > MAX_AGENTS {
        return Err(AgentsError::Count(n));
    }
    let addr = options
        .listen
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    if !addr.ip().is_loopback() && !options.allow_remote {
        return Err(AgentsError::Remote(addr));
    }
    let listener = bind(addr).map_err(|e| AgentsError::Listen {
        addr,
        why: e.to_string(),
    })?;
    let bound = listener.local_addr().map_err(|e| AgentsError::Listen {
        addr,
        why: e.to_string(),
    })?;
    let mut children = Vec::new();
    if options.listen.is_none() {
        let program = match options.program.clone() {
            Some(p) => p,
            None => std::env::current_exe().map_err(|e| AgentsError::Spawn {
                index: 0,
                why: format!("cannot find the faultline executable: {e}"),
            })?,
        };
        for index in 0..n {
            let child = tokio::process::Command::new(&program)
                .arg("agent")
                .arg("--runner")
                .arg(bound.to_string())
                .arg("--index")
                .arg(index.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| AgentsError::Spawn {
                    index,
                    why: e.to_string(),
                })?;
            children.push(child);
        }
    } else {
        eprintln!("faultline: waiting for {n} agents on {bound}");
    }

    let deadline = Instant::now() + options.register_within;
    let mut agents: Vec<Agent> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while agents.len() < n as usize {
        let failed = |detail: String| AgentsError::Registration {
            registered: agents.len() as u32,
            expected: n,
            secs: options.register_within.as_secs_f64(),
            detail,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                match hello(stream, n, &agents).await {
                    Ok(agent) => agents.push(agent),
                    Err(why) => refused.push(format!("{peer}: {why}")),
                }
            }
            _ = tick.tick() => {
                for (index, child) in children.iter_mut().enumerate() {
                    if let Ok(Some(status)) = child.try_wait() {
                        if !agents.iter().any(|a| a.index == index as u32) {
                            return Err(failed(format!(": agent process {index} exited before it registered ({status})")));
                        }
                    }
                }
                if Instant::now() >= deadline {
                    let detail = if refused.is_empty() {
                        String::new()
                    } else {
                        format!("; refused: {}", refused.join("; "))
                    };
                    return Err(failed(detail));
                }
            }
        }
    }
    for agent in &mut agents {
        measure_clock(agent)
            .await
            .map_err(|e| AgentsError::Registration {
                registered: n - 1,
                expected: n,
                secs: options.register_within.as_secs_f64(),
                detail: format!(
                    ": agent {} ({}) broke off while its clock was measured: {e}",
                    agent.index, agent.host
                ),
            })?;
    }
    agents.sort_by_key(|a| a.index);
    Ok(Registered { agents, children })
}

/// A listener with a backlog for bursts of agents dialling at once.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// Reads an agent's hello and gives it its index: the one it brought, or the lowest free one.
async fn hello(stream: TcpStream, n: u32, taken: &[Agent]) -> Result<Agent, String> {
    let _ = stream.set_nodelay(true);
    let (read_half, mut writer) = stream.into_split();
    let mut reader = BufReader::new(read_half);
    let mut buf = Vec::new();
    let said = tokio::time::timeout(
        HELLO_WITHIN,
        protocol::read::<_, ToRunner>(&mut reader, &mut buf),
    )
    .await
    .map_err(|_| format!("said nothing within {} s", HELLO_WITHIN.as_secs()))?
    .map_err(|e| e.to_string())?;
    let ToRunner::Hello {
        protocol: version,
        index,
        host,
        ..
    } = said
    else {
        return Err("did not start with a hello".into());
    };
    let index = if version != protocol::PROTOCOL {
        Err(format!(
            "speaks agent protocol {version}, this runner {}",
            protocol::PROTOCOL
        ))
    } else {
        match index {
            Some(i) if i >= n => Err(format!("index {i} is out of range for {n} agents")),
            Some(i) if taken.iter().any(|a| a.index == i) => {
                Err(format!("index {i} is taken by another agent"))
            }
            Some(i) => Ok(i),
            None => (0..n)
                .find(|i| !taken.iter().any(|a| a.index == *i))
                .ok_or_else(|| "every index is taken".to_string()),
        }
    };
    let index = match index {
        Ok(i) => i,
        Err(why) => {
            let _ = protocol::write(&mut writer, &ToAgent::Refused { why: why.clone() }).await;
            return Err(why);
        }
    };
    Ok(Agent {
        index,
        host,
        offset_ns: 0,
        uncertainty_ns: u64::MAX,
        reader,
        writer,
    })
}

/// Measures the agent's clock offset over a few pings; keeps the exchange with the shortest round trip.
async fn measure_clock(agent: &mut Agent) -> Result<(), WireError> {
    let mut buf = Vec::new();
    for seq in 0..PINGS {
        let sent = SystemTime::now();
        protocol::write(&mut agent.writer, &ToAgent::Ping { seq }).await?;
        let answer = tokio::time::timeout(
            HELLO_WITHIN,
            protocol::read::<_, ToRunner>(&mut agent.reader, &mut buf),
        )
        .await
        .map_err(|_| WireError::Malformed(format!("no answer to ping {seq}")))??;
        let received = SystemTime::now();
        let ToRunner::Pong {
            seq: echoed,
            wall_ns,
        } = answer
        else {
            return Err(WireError::Malformed("expected a pong".into()));
        };
        if echoed != seq {
            return Err(WireError::Malformed(format!(
                "pong {echoed} answers ping {seq}"
            )));
        }
        let (t0, t1) = (protocol::unix_ns(sent), protocol::unix_ns(received));
        let rtt = t1.saturating_sub(t0);
        if rtt / 2 < agent.uncertainty_ns {
            let midpoint = t0 / 2 + t1 / 2;
            agent.offset_ns =
                i64::try_from(i128::from(wall_ns) - i128::from(midpoint)).unwrap_or(0);
            agent.uncertainty_ns = rtt / 2;
        }
    }
    Ok(())
}
