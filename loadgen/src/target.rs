//! The base URL a run sends to, and the loopback rule: traffic goes to 127.0.0.0/8, ::1 or `localhost` unless
//! the user names another host explicitly.
//!
//! Not for resolving names or opening connections; only for refusing a target before any traffic exists.

use faultline_units::hosts::host_allowed;

use hyper::http::uri::{Authority, Scheme};
use hyper::Uri;

use crate::LoadError;

/// A validated `http://host:port` or `https://host:port` base (the path of the base URL, if any, is not part of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub(crate) scheme: Scheme,
    pub(crate) authority: Authority,
}

impl Target {
    /// Parses `base_url` and checks its host: loopback, or listed in `allow_hosts`.
    pub fn parse(base_url: &str, allow_hosts: &[String]) -> Result<Target, LoadError> {
        let bad = |why: &str| LoadError::BadUrl {
            url: base_url.to_string(),
            why: why.to_string(),
        };
        if !base_url.contains("://") {
            return Err(bad("it has no scheme; write it like http://127.0.0.1:8080"));
        }
        let uri: Uri = base_url
            .parse()
            .map_err(|_| bad("it is not a URL (write it like http://127.0.0.1:8080)"))?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            Some(_) => return Err(bad("the scheme must be http:// or https://")),
            None => return Err(bad("it has no scheme; write it like http://127.0.0.1:8080")),
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| bad("it has no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("it has no host"));
        }
        if !host_allowed(host, allow_hosts) {
            return Err(LoadError::HostNotAllowed {
                host: host.to_string(),
            });
        }
        Ok(Target {
            scheme: if uri.scheme_str() == Some("https") {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            },
            authority,
        })
    }

    /// True for an `https://` target.
    pub(crate) fn is_tls(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }

    /// The host without brackets (`::1`, `127.0.0.1`, `localhost`): the name TLS verifies.
    pub(crate) fn host(&self) -> &str {
        self.authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
    }
}

/// Splits a full URL such as `http://127.0.0.1:8080/product/1?x=2` into the base (`http://127.0.0.1:8080`)
/// and the path with its query (`/product/1?x=2`, or `/`), checking the base like [`Target::parse`].
pub fn split_url(url: &str, allow_hosts: &[String]) -> Result<(String, String), LoadError> {
    // Split by hand: the path may hold generators such as {rand:1..1000}, which are not valid URI characters
    // until rendered; the path itself is checked when the request mix is compiled.
    let Some(scheme_end) = url.find("://") else {
        return Target::parse(url, allow_hosts)
            .map(|t| (format!("{}://{}", t.scheme, t.authority), "/".to_string()));
    };
    let after = scheme_end + 3;
    let cut = url[after..]
        .find(['/', '?'])
        .map_or(url.len(), |i| after + i);
    let target = Target::parse(&url[..cut], allow_hosts)?;
    let path = match &url[cut..] {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    Ok((format!("{}://{}", target.scheme, target.authority), path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_targets_are_accepted_and_others_need_to_be_allowed() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://127.1.2.3",
            "http://[::1]:80/x",
            "http://localhost:1",
        ] {
            Target::parse(ok, &[]).unwrap();
        }
        let e = Target::parse("http://10.0.0.5:80", &[]).unwrap_err();
        assert!(matches!(e, LoadError::HostNotAllowed { .. }), "{e}");
        assert!(e.to_string().contains("--allow-host"), "{e}");
        Target::parse("http://10.0.0.5:80", &["10.0.0.5".to_string()]).unwrap();
    }

    #[test]
    fn a_full_url_splits_into_base_and_path() {
        let (base, path) = split_url("http://127.0.0.1:8080/product/1?x=2", &[]).unwrap();
        assert_eq!(
            (base.as_str(), path.as_str()),
            ("http://127.0.0.1:8080", "/product/1?x=2")
        );
        assert_eq!(split_url("http://localhost:9", &[]).unwrap().1, "/");
        let (_, path) = split_url("http://[::1]:9/p/{rand:1..1000}", &[]).unwrap();
        assert_eq!(path, "/p/{rand:1..1000}");
        assert!(split_url("http://10.1.1.1/x", &[]).is_err());
        assert!(split_url("127.0.0.1:8080/x", &[]).is_err());
    }

    #[test]
    fn malformed_urls_are_refused_with_the_reason() {
        for (bad, why) in [
            ("127.0.0.1:8080", "no scheme"),
            ("http://exa mple", "not a URL"),
            ("ftp://127.0.0.1", "http://"),
            ("http://", "not a URL"),
            ("http://u:p@127.0.0.1", "credentials"),
            ("not a url", "no scheme"),
        ] {
            let e = Target::parse(bad, &[]).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
