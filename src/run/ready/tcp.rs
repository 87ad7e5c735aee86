//! Readiness as an accepted connection: the SUT's port takes a TCP connection, for services that offer nothing
//! else before their first request (a raw TCP server, a gRPC server without the health service).

use tokio::net::TcpStream;

pub struct TcpProbe {
    /// `host:port`.
    pub address: String,
}

impl TcpProbe {
    pub async fn attempt(&self) -> Result<(), String> {
        TcpStream::connect(&self.address)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
