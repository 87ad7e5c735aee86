//! Readiness as an HTTP answer: GET a path on the SUT until it answers 2xx (the form every scenario had before
//! there were others, and still the default, `/health`).

use std::time::Duration;

pub struct HttpProbe {
    pub url: String,
    client: Option<reqwest::Client>,
}

impl HttpProbe {
    pub fn new(url: String) -> HttpProbe {
        let client = crate::http::client_builder()
            .timeout(Duration::from_secs(1))
            .build()
            .ok();
        HttpProbe { url, client }
    }

    pub async fn attempt(&self) -> Result<(), String> {
        let client = self
            .client
            .as_ref()
            .ok_or("no HTTP client could be built")?;
        let response = client.get(&self.url).send().await.map_err(|e| {
            // reqwest's own words name the URL again; the cause (refused, reset) is the news.
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            cause.to_string()
        })?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("answered {}", response.status()))
        }
    }
}
