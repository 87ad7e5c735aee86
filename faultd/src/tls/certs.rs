//! Certificates: the per-run CA and what it signs, or the PEM files a configuration names.
//!
//! For: minting, at start and in memory only, a CA and the leaves the listener serves (the good one for
//! 127.0.0.1, ::1 and localhost, and the three the certificate faults serve: expired, wrong name, untrusted
//! issuer), and reading certificate, key and client-CA files with errors that name the file and the field. Not
//! for: trust stores; nothing here writes anywhere (the caller writes the CA's PEM where it is asked to).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

use super::TlsSetupError;

/// A certificate chain (leaf first) and its key.
#[derive(Debug)]
pub(crate) struct Identity {
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
}

/// What the run's CA minted.
#[derive(Debug)]
pub(crate) struct Minted {
    /// The CA's certificate, PEM: what a caller trusts.
    pub(crate) ca_pem: String,
    /// The listener's certificate: 127.0.0.1, ::1 and localhost, valid now.
    pub(crate) good: Identity,
    /// The same names, expired a month ago.
    pub(crate) expired: Identity,
    /// Valid now, for `wrong.invalid` only.
    pub(crate) wrong_name: Identity,
    /// The right names and dates, signed by a CA nobody was given.
    pub(crate) untrusted: Identity,
}

/// The names the listener's certificate covers.
pub(crate) const NAMES: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

const DAY: Duration = Duration::from_secs(86_400);

fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn minted(e: rcgen::Error) -> TlsSetupError {
    TlsSetupError {
        field: "",
        file: "(minted)".into(),
        message: format!("cannot mint the run's certificates: {e}"),
    }
}

/// A CA valid from yesterday for a year.
fn ca(name: &str) -> Result<(CertificateParams, KeyPair), rcgen::Error> {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = since_epoch();
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "faultline");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = epoch + (now - DAY);
    params.not_after = epoch + (now + 365 * DAY);
    Ok((params, KeyPair::generate()?))
}

/// A server leaf for `names`, valid over `[now + from, now + to]` (negative offsets in the past).
fn leaf(
    names: &[&str],
    valid: (i64, i64),
    issuer: &Issuer<'_, KeyPair>,
) -> Result<Identity, rcgen::Error> {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = since_epoch().as_secs() as i64;
    let at = |days: i64| epoch + Duration::from_secs((now + days * 86_400).max(0) as u64);
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = at(valid.0);
    params.not_after = at(valid.1);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok(Identity {
        chain: vec![cert.der().clone()],
        // rcgen serialises keys as PKCS#8.
        key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    })
}

/// Mints the run's CA and every leaf the listener may serve.
pub(crate) fn mint() -> Result<Minted, TlsSetupError> {
    let (ca_params, ca_key) = ca("faultd run CA").map_err(minted)?;
    let ca_pem = ca_params.self_signed(&ca_key).map_err(minted)?.pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let (other_params, other_key) = ca("faultd untrusted issuer").map_err(minted)?;
    let other = Issuer::new(other_params, other_key);
    Ok(Minted {
        ca_pem,
        good: leaf(&NAMES, (-1, 365), &issuer).map_err(minted)?,
        expired: leaf(&NAMES, (-60, -30), &issuer).map_err(minted)?,
        wrong_name: leaf(&["wrong.invalid"], (-1, 365), &issuer).map_err(minted)?,
        untrusted: leaf(&NAMES, (-1, 365), &other).map_err(minted)?,
    })
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(path).map_err(|e| TlsSetupError {
        field,
        file: path.display().to_string(),
        message: format!("cannot read it: {e}"),
    })
}

/// Every certificate of a PEM file; at least one.
pub(crate) fn read_certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let bad = |message: String| TlsSetupError {
        field,
        file: path.display().to_string(),
        message,
    };
    let bytes = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// The certificate chain and key of `tls: { cert, key }`. That the key matches the certificate is checked when
/// the listener's configuration is built.
pub(crate) fn read_identity(cert: &Path, key: &Path) -> Result<Identity, TlsSetupError> {
    let chain = read_certificates("cert", cert)?;
    let bytes = read("key", key)?;
    let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsSetupError {
        field: "key",
        file: key.display().to_string(),
        message: format!("holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
    })?;
    Ok(Identity { chain, key })
}

/// The CAs of `client_ca`, as roots to verify client certificates against.
pub(crate) fn read_roots(field: &'static str, path: &Path) -> Result<RootCertStore, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(field, path)? {
        roots.add(cert).map_err(|e| TlsSetupError {
            field,
            file: path.display().to_string(),
            message: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}
