//! The host guard: faultline sends traffic to loopback only, unless a scenario lists other hosts under
//! `allow_hosts` (the rule itself: `faultline_units::hosts`). Not the only guard: loadgen refuses other targets on
//! its own.

use faultline_units::hosts::host_allowed;

/// Refuses a URL whose host is not loopback and not in `allow`.
pub fn check_host(url: &str, allow: &[String]) -> Result<(), String> {
    let after_scheme = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{url:?} is not a URL (expected http://HOST:PORT)"))?;
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(authority)
    };
    if host_allowed(host, allow) {
        Ok(())
    } else {
        Err(format!("{host} is not a loopback address; faultline sends traffic to 127.0.0.1 / ::1 only unless the scenario lists the host under `allow_hosts`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_pass_and_others_need_the_allow_list() {
        assert!(check_host("http://127.0.0.1:8080/x", &[]).is_ok());
        assert!(check_host("http://127.3.2.1:8080", &[]).is_ok());
        assert!(check_host("http://[::1]:8080/", &[]).is_ok());
        assert!(check_host("http://localhost:80", &[]).is_ok());
        let e = check_host("http://10.0.0.5:80", &[]).unwrap_err();
        assert!(e.contains("10.0.0.5 is not a loopback address"), "{e}");
        assert!(check_host("http://staging.internal:80", &["staging.internal".into()]).is_ok());
        assert!(check_host("not a url", &[]).is_err());
    }
}
