//! The CA file a network store's URL may name (`cacert=` on Redis and etcd, `sslrootcert=` on
//! PostgreSQL, `ssl-ca=` on MySQL): read once when the store opens and checked to hold PEM
//! certificates, so that a wrong path or a file of something else fails then, naming the file,
//! not at the first TLS handshake.

use crate::error::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// The file at `path`, which the URL's parameter `param` of store `name` names: a Config error
/// when it cannot be read, is not a regular file, is larger than
/// [`crate::bounds::MAX_CA_FILE_BYTES`], holds a PEM section that does not parse, or holds no certificate.
///
/// Returns its PEM text (for clients that take the file whole: Redis, MySQL) and the
/// certificates in it (for clients that take a root store: PostgreSQL, etcd).
pub(super) fn read(
    path: &str,
    param: &str,
    name: &str,
) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>)> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::config(format!("store '{name}': cannot read {param} '{path}': {e}"))
    };
    let pem =
        crate::bounds::read_file(std::path::Path::new(path), crate::bounds::MAX_CA_FILE_BYTES)
            .map_err(|e| unreadable(&e))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| unreadable(&e))?;
    if certs.is_empty() {
        return Err(Error::config(format!(
            "store '{name}': {param} '{path}' holds no PEM certificate (-----BEGIN \
             CERTIFICATE-----)"
        )));
    }
    Ok((pem, certs))
}
