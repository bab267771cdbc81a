//! Certificates for the TLS tests, made fresh for each run: a CA, a server certificate for
//! 127.0.0.1 and localhost, a client certificate for mutual TLS, and a second CA that signed
//! none of them (a client trusting it must refuse the server).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// PEM files in a directory of their own.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn generate() -> Self {
        let dir = tempfile::Builder::new().prefix("taskgate-pki-").tempdir().expect("a temp dir");
        let (ca_pem, issuer) = authority("taskgate test CA");
        write(dir.path(), "ca.pem", &ca_pem);
        let (other_pem, _) = authority("some other CA");
        write(dir.path(), "other-ca.pem", &other_pem);
        // The server's certificate is also a client's: cluster nodes present it to each other.
        let both = [ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        leaf(dir.path(), "server", &["127.0.0.1", "localhost"], &both, &issuer);
        leaf(dir.path(), "client", &["taskgate"], &[ExtendedKeyUsagePurpose::ClientAuth], &issuer);
        Self { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA that signed the server's and the client's certificates.
    pub fn ca(&self) -> PathBuf {
        self.file("ca.pem")
    }

    /// A CA that signed nothing here.
    pub fn other_ca(&self) -> PathBuf {
        self.file("other-ca.pem")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.file("server.pem")
    }

    pub fn server_key(&self) -> PathBuf {
        self.file("server-key.pem")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.file("client.pem")
    }

    pub fn client_key(&self) -> PathBuf {
        self.file("client-key.pem")
    }

    /// The same, as the store takes them.
    pub fn tls_pem(&self) -> taskgate_shared::store::TlsPem {
        let read = |path: PathBuf| std::fs::read(path).expect("a PEM file");
        taskgate_shared::store::TlsPem {
            ca: Some(read(self.ca())),
            client: Some((read(self.client_cert()), read(self.client_key()))),
        }
    }

    /// The client arguments of mutual TLS with this CA: `--redis-ca-file`, `--redis-client-cert`,
    /// `--redis-client-key`.
    pub fn client_args(&self) -> Vec<String> {
        [
            ("--redis-ca-file", self.ca()),
            ("--redis-client-cert", self.client_cert()),
            ("--redis-client-key", self.client_key()),
        ]
        .into_iter()
        .flat_map(|(flag, path)| [flag.to_owned(), path.display().to_string()])
        .collect()
    }
}

fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().expect("a CA key");
    let cert = params.self_signed(&key).expect("a CA certificate");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(dir: &Path, name: &str, names: &[&str], usage: &[ExtendedKeyUsagePurpose], issuer: &Issuer<'static, KeyPair>) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = usage.to_vec();
    let key = KeyPair::generate().expect("a leaf key");
    let cert = params.signed_by(&key, issuer).expect("a leaf certificate");
    write(dir, &format!("{name}.pem"), &cert.pem());
    write(dir, &format!("{name}-key.pem"), &key.serialize_pem());
}

fn write(dir: &Path, name: &str, pem: &str) {
    std::fs::write(dir.join(name), pem).expect("write a PEM file");
}
