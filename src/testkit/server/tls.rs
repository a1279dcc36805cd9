//! TLS listeners for the reference cluster, and the certificates tests give them.
//!
//! [`TestCa`] is a certificate authority made in the test (rcgen, ECDSA P-256): it issues
//! server certificates for the names a test wants (valid, or already expired) and client
//! certificates. A [`TlsListener`] is a broker's server side (rustls over the std socket), with
//! or without a required client certificate. Nothing is read from or written to disk.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::rc::Rc;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};

/// A certificate authority made for one test.
pub struct TestCa {
    certificate: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate issued by a [`TestCa`] with its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The leaf certificate (the CA itself is the trust anchor and is not in the chain).
    pub certificate_pem: String,
    /// The leaf's private key, PKCS#8, unencrypted.
    pub key_pem: String,
}

impl Issued {
    /// The key and the chain in one PEM text, the form of `ssl.keystore.location`.
    pub fn combined_pem(&self) -> String {
        format!("{}{}", self.key_pem, self.certificate_pem)
    }
}

/// Whether an issued certificate is in its validity period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From 1975 to 4096 (rcgen's defaults).
    Current,
    /// Valid only during the year 2000.
    Expired,
}

impl TestCa {
    /// A new authority named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("generate a key");
        let certificate = params.self_signed(&key).expect("self-sign the authority");
        TestCa { certificate, key }
    }

    /// The authority's certificate, PEM: what a truststore holds to trust what it issues.
    pub fn certificate_pem(&self) -> String {
        self.certificate.pem()
    }

    /// A server certificate for `names` (DNS names, or IP addresses such as `127.0.0.1`).
    pub fn issue_server(&self, names: &[&str], validity: Validity) -> Issued {
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth, validity)
    }

    /// A client certificate for `name`.
    pub fn issue_client(&self, name: &str) -> Issued {
        self.issue(
            &[name],
            ExtendedKeyUsagePurpose::ClientAuth,
            Validity::Current,
        )
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose, validity: Validity) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("valid names");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        if validity == Validity::Expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().expect("generate a key");
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .expect("sign a certificate");
        Issued {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// The server side of a broker's TLS listener.
#[derive(Debug, Clone)]
pub struct TlsListener {
    config: Arc<ServerConfig>,
}

/// A TLS version a listener may speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
}

impl TlsVersion {
    fn rustls(self) -> &'static rustls::SupportedProtocolVersion {
        match self {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        }
    }
}

impl TlsListener {
    /// A listener presenting `identity`, speaking TLS 1.2 and 1.3; clients are not asked for
    /// a certificate.
    pub fn new(identity: &Issued) -> TlsListener {
        TlsListener::with_versions(identity, &[TlsVersion::Tls13, TlsVersion::Tls12])
    }

    /// A listener presenting `identity` that speaks only `versions`.
    pub fn with_versions(identity: &Issued, versions: &[TlsVersion]) -> TlsListener {
        let versions: Vec<_> = versions.iter().map(|v| v.rustls()).collect();
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth();
        TlsListener::finish(builder, identity)
    }

    /// A listener presenting `identity` that requires a client certificate issued by `ca`
    /// (Kafka's `ssl.client.auth=required`).
    pub fn requiring_client_certificates(identity: &Issued, ca: &TestCa) -> TlsListener {
        let mut roots = RootCertStore::empty();
        roots
            .add(ca.certificate.der().clone())
            .expect("the authority is a trust anchor");
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .expect("a client verifier");
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports TLS 1.2 and 1.3")
            .with_client_cert_verifier(verifier);
        TlsListener::finish(builder, identity)
    }

    fn finish(
        builder: rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>,
        identity: &Issued,
    ) -> TlsListener {
        let chain = CertificateDer::pem_slice_iter(identity.certificate_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("the issued certificate parses");
        let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
            .expect("the issued key parses");
        let config = builder
            .with_single_cert(chain, key)
            .expect("the key goes with the certificate");
        TlsListener {
            config: Arc::new(config),
        }
    }

    /// Runs the server side of the handshake on an accepted socket. `Err` when it failed (the
    /// client refused the certificate, or presented none or a bad one when one is required);
    /// rustls has then sent the client the alert that says why.
    pub(super) fn accept(&self, socket: TcpStream) -> io::Result<TlsSocket> {
        let connection = ServerConnection::new(self.config.clone()).map_err(io::Error::other)?;
        let mut stream = StreamOwned::new(connection, socket);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsSocket(Rc::new(RefCell::new(stream))))
    }
}

impl TlsSocket {
    /// The version the handshake settled on.
    pub(super) fn version(&self) -> Option<TlsVersion> {
        match self.0.borrow().conn.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_2 => Some(TlsVersion::Tls12),
            rustls::ProtocolVersion::TLSv1_3 => Some(TlsVersion::Tls13),
            _ => None,
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server TLS stream shared by a connection's buffered reader and writer. The connection is
/// served on one thread, reading and writing in turn, so a borrow never overlaps another.
#[derive(Clone)]
pub(super) struct TlsSocket(Rc<RefCell<StreamOwned<ServerConnection, TcpStream>>>);

impl Read for TlsSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

impl Write for TlsSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.borrow_mut().flush()
    }
}
