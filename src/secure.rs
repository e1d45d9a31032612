//! Certificates and the first user, for a secure cluster.
//!
//! `quarry playground --secure` makes a private CA and one certificate for
//! its processes with [`generate_certs`] (rcgen: ECDSA P-256, the names
//! `localhost`, `127.0.0.1` and `::1`, common name [`NODE_CN`], usable as
//! server and client certificate), turns on `[security]` in every child,
//! and creates the superuser `root` with [`put_user`] before it prints
//! `ready`. An operator bootstraps a cluster of their own the same way:
//! certificates from their CA in each process's `[security]`, then
//! `quarry user add root --store …` with a cluster certificate, since only
//! the cluster's certificates reach the stores' meta service.
//!
//! The CA's private key is kept next to its certificate (`ca.key`, mode
//! 0600) so a restarted playground signs nothing new; a real deployment
//! keeps its CA key elsewhere.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use quarry_compute::cluster::Cluster;
use quarry_proto::meta::PutUserMode;
use quarry_proto::security::SecurityConfig;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The common name of the playground's process certificate (its stores'
/// `cert-allowed-cn`).
pub const NODE_CN: &str = "quarry-node";

/// Where a secure playground's certificates are.
#[derive(Debug, Clone)]
pub struct CertPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertPaths {
    fn in_dir(dir: &Path) -> Self {
        CertPaths {
            ca: dir.join("ca.pem"),
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
        }
    }

    /// The `[security]` these certificates make.
    pub fn config(&self) -> SecurityConfig {
        SecurityConfig {
            ca_path: self.ca.display().to_string(),
            cert_path: self.cert.display().to_string(),
            key_path: self.key.display().to_string(),
            ..Default::default()
        }
    }
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// A CA and a process certificate under `dir`, made once: certificates
/// already there are kept.
pub fn generate_certs(dir: &Path) -> Result<CertPaths> {
    let paths = CertPaths::in_dir(dir);
    if paths.ca.exists() && paths.cert.exists() && paths.key.exists() {
        return Ok(paths);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let fail = |e: rcgen::Error| anyhow!("making certificates: {e}");

    let ca_key = KeyPair::generate().map_err(fail)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Quarry playground CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
    write_private(&dir.join("ca.key"), &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);

    let node_key = KeyPair::generate().map_err(fail)?;
    let names = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    let mut node = CertificateParams::new(names).map_err(fail)?;
    node.distinguished_name.push(DnType::CommonName, NODE_CN);
    node.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    node.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let node_cert = node.signed_by(&node_key, &issuer).map_err(fail)?;
    write_private(&paths.key, &node_key.serialize_pem())?;
    std::fs::write(&paths.cert, node_cert.pem())?;
    // The CA last: its presence says the set is complete.
    std::fs::write(&paths.ca, ca_cert.pem())?;
    Ok(paths)
}

/// Makes this process's connections to stores use TLS with `security`'s
/// certificates (for the commands that talk to stores: status, load, user).
pub fn install_cluster_tls(security: &SecurityConfig) -> Result<()> {
    if let Some(tls) = security.load().map_err(anyhow::Error::msg)? {
        quarry_proto::security::install_client(tls.client());
    }
    Ok(())
}

/// Creates (or, with `mode`, alters or replaces) a user through the meta
/// service of `stores`; the password is hashed here.
pub async fn put_user(
    stores: &[String],
    name: &str,
    password: &str,
    superuser: bool,
    mode: PutUserMode,
) -> Result<()> {
    let cluster = Cluster::new(stores.to_vec(), Duration::from_secs(10));
    let user = quarry_compute::auth::user_def(name, password.to_string(), superuser).await?;
    cluster.put_user(user, mode).await?;
    Ok(())
}

/// The password from `QUARRY_PASSWORD`, or asked for on the terminal.
pub fn password_for(user: &str) -> Result<String> {
    if let Ok(p) = std::env::var("QUARRY_PASSWORD") {
        return Ok(p);
    }
    rpassword::prompt_password(format!("password for {user}: "))
        .context("reading the password (or set QUARRY_PASSWORD)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_load_and_carry_the_node_name() {
        let dir = tempfile::tempdir().unwrap();
        let paths = generate_certs(dir.path()).unwrap();
        let tls = paths.config().load().unwrap();
        assert!(tls.is_some());
        let pem = std::fs::read_to_string(&paths.cert).unwrap();
        let der = pem_der(&pem);
        assert_eq!(
            quarry_proto::security::common_name(&der).as_deref(),
            Some(NODE_CN)
        );
        // Made once: a second call keeps them.
        let before = std::fs::read(&paths.ca).unwrap();
        generate_certs(dir.path()).unwrap();
        assert_eq!(std::fs::read(&paths.ca).unwrap(), before);
    }

    fn pem_der(pem: &str) -> Vec<u8> {
        use base64::Engine as _;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    }
}
