//! The control plane's PKI, made with the `openssl` command.
//!
//! One CA signs: the serving certificate every component presents (its SANs
//! hold the bind address, loopback, `localhost` and the in-cluster names of
//! the `kubernetes` Service, so agents in network namespaces can verify the
//! apiserver at the bind address), and client certificates for the admin
//! (`system:masters`), kube-controller-manager and kube-scheduler (users that
//! the bootstrap RBAC policy knows). A separate EC key signs ServiceAccount
//! tokens. EC P-256 keys keep generation fast.

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::{Error, Result};

/// The first address of the Service range; the `kubernetes` Service gets it.
pub(crate) const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The common name of the aggregator's client certificate, which extension API servers
/// accept (`--requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct CertPair {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

/// Every file of the control plane's PKI.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate (trust anchor of every client).
    pub ca_cert: PathBuf,
    /// Its key, for [`Pki::issue`].
    ca_key: PathBuf,
    /// The serving certificate of every component.
    pub serving: CertPair,
    /// Client certificate of the admin (`system:masters`).
    pub admin: CertPair,
    /// Client certificate of kube-controller-manager.
    pub controller_manager: CertPair,
    /// Client certificate of kube-scheduler.
    pub scheduler: CertPair,
    /// The front-proxy CA: extension API servers trust requests forwarded by the
    /// aggregator only with a client certificate it signed (`--requestheader-client-ca-file`).
    pub front_proxy_ca: PathBuf,
    /// The aggregator's client certificate (`--proxy-client-cert-file`).
    pub front_proxy_client: CertPair,
    /// Private key that signs ServiceAccount tokens.
    pub service_account_key: PathBuf,
    /// Its public key, which the apiserver verifies tokens with.
    pub service_account_pub: PathBuf,
}

impl Pki {
    /// Creates the PKI in `dir` for an apiserver reachable at `bind`.
    pub(crate) fn generate(dir: &Path, bind: IpAddr) -> Result<Self> {
        fs::create_dir_all(dir).map_err(Error::io("create pki dir", dir))?;
        let (ca_cert, ca_key) = new_ca(dir, "ca", "hcomm-e2e-ca")?;
        let ca = Ca {
            dir,
            cert: &ca_cert,
            key: &ca_key,
        };

        let mut sans = vec![
            "DNS:localhost".to_owned(),
            "DNS:kubernetes".to_owned(),
            "DNS:kubernetes.default".to_owned(),
            "DNS:kubernetes.default.svc".to_owned(),
            "DNS:kubernetes.default.svc.cluster.local".to_owned(),
            "IP:127.0.0.1".to_owned(),
            format!("IP:{KUBERNETES_SERVICE_IP}"),
        ];
        let bind_san = format!("IP:{bind}");
        if !sans.contains(&bind_san) && !bind.is_unspecified() {
            sans.push(bind_san);
        }
        let serving = ca.issue(
            "serving",
            "/CN=hcomm-e2e-apiserver",
            "serverAuth, clientAuth",
            Some(&sans),
        )?;
        let admin = ca.issue(
            "admin",
            "/O=system:masters/CN=hcomm-admin",
            "clientAuth",
            None,
        )?;
        let controller_manager = ca.issue(
            "controller-manager",
            "/CN=system:kube-controller-manager",
            "clientAuth",
            None,
        )?;
        let scheduler = ca.issue("scheduler", "/CN=system:kube-scheduler", "clientAuth", None)?;
        // The aggregation layer's own trust chain, apart from the client CA: the
        // apiserver proves to an extension API server (KEDA's metrics server) that it
        // forwards a request it already authenticated, with this client certificate.
        let (front_proxy_ca, front_proxy_ca_key) =
            new_ca(dir, "front-proxy-ca", "hcomm-e2e-front-proxy-ca")?;
        let front_proxy_client = Ca {
            dir,
            cert: &front_proxy_ca,
            key: &front_proxy_ca_key,
        }
        .issue(
            "front-proxy-client",
            &format!("/CN={FRONT_PROXY_CLIENT}"),
            "clientAuth",
            None,
        )?;

        let service_account_key = dir.join("sa.key");
        let service_account_pub = dir.join("sa.pub");
        ec_key(&service_account_key)?;
        openssl(&[
            "pkey",
            "-in",
            &s(&service_account_key),
            "-pubout",
            "-out",
            &s(&service_account_pub),
        ])?;
        Ok(Self {
            ca_cert,
            ca_key,
            serving,
            admin,
            controller_manager,
            scheduler,
            front_proxy_ca,
            front_proxy_client,
            service_account_key,
            service_account_pub,
        })
    }
}

/// A self-signed CA `<name>.crt` / `<name>.key` with common name `cn`.
fn new_ca(dir: &Path, name: &str, cn: &str) -> Result<(PathBuf, PathBuf)> {
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.crt"));
    ec_key(&key)?;
    let config = write(
        dir,
        &format!("{name}.cnf"),
        &format!(
            "[req]\nprompt = no\ndistinguished_name = dn\nx509_extensions = v3\n\
             [dn]\nCN = {cn}\n\
             [v3]\nbasicConstraints = critical, CA:TRUE\n\
             keyUsage = critical, keyCertSign, cRLSign, digitalSignature\n\
             subjectKeyIdentifier = hash\n"
        ),
    )?;
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        &s(&key),
        "-config",
        &s(&config),
        "-days",
        "3650",
        "-out",
        &s(&cert),
    ])?;
    Ok((cert, key))
}

impl Pki {
    /// Issues `<dir>/<name>.crt` and `.key`, signed by the control plane's CA, for a
    /// server that is also a client (`serverAuth, clientAuth`) under `cn`, valid for
    /// `sans` (`DNS:…`, `IP:…`): what an extension API server or a controller beside the
    /// control plane presents.
    pub fn issue(&self, dir: &Path, name: &str, cn: &str, sans: &[String]) -> Result<CertPair> {
        fs::create_dir_all(dir).map_err(Error::io("create cert dir", dir))?;
        Ca {
            dir,
            cert: &self.ca_cert,
            key: &self.ca_key,
        }
        .issue(
            name,
            &format!("/CN={cn}"),
            "serverAuth, clientAuth",
            Some(sans),
        )
    }
}

struct Ca<'a> {
    dir: &'a Path,
    cert: &'a Path,
    key: &'a Path,
}

impl Ca<'_> {
    /// Issues a leaf certificate `<name>.crt` / `<name>.key`.
    fn issue(
        &self,
        name: &str,
        subject: &str,
        usage: &str,
        sans: Option<&[String]>,
    ) -> Result<CertPair> {
        let key = self.dir.join(format!("{name}.key"));
        let csr = self.dir.join(format!("{name}.csr"));
        let cert = self.dir.join(format!("{name}.crt"));
        ec_key(&key)?;
        openssl(&[
            "req",
            "-new",
            "-key",
            &s(&key),
            "-subj",
            subject,
            "-out",
            &s(&csr),
        ])?;
        let mut ext = format!(
            "basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = {usage}\nauthorityKeyIdentifier = keyid\n"
        );
        if let Some(sans) = sans {
            ext.push_str(&format!("subjectAltName = {}\n", sans.join(", ")));
        }
        let ext = write(self.dir, &format!("{name}.ext"), &ext)?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &s(&csr),
            "-CA",
            &s(self.cert),
            "-CAkey",
            &s(self.key),
            "-CAcreateserial",
            "-CAserial",
            &s(&self.dir.join("ca.srl")),
            "-days",
            "3650",
            "-extfile",
            &s(&ext),
            "-out",
            &s(&cert),
        ])?;
        let _ = fs::remove_file(&csr);
        Ok(CertPair { cert, key })
    }
}

fn ec_key(path: &Path) -> Result<()> {
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        &s(path),
    ])
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    fs::write(&path, text).map_err(Error::io("write", &path))?;
    Ok(path)
}

fn openssl(args: &[&str]) -> Result<()> {
    let command = || {
        format!(
            "openssl {}",
            args.iter().take(2).copied().collect::<Vec<_>>().join(" ")
        )
    };
    let output = Command::new("openssl")
        .args(args)
        .output()
        .map_err(|error| Error::Command {
            command: command(),
            message: format!("{error} (is openssl installed?)"),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command: command(),
            message: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    }
}

fn s(path: &Path) -> String {
    path.display().to_string()
}
