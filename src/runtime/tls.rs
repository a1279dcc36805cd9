//! The TLS side of a broker connection (`security.protocol=SSL` and `SASL_SSL`): the name the
//! broker's certificate must carry, the handshake, and which TLS errors are refusals that no
//! retry changes (fatal, as `ConnectionError::Tls`) rather than a failed connection.

use std::io;
use std::sync::Arc;

use futures_rustls::client::TlsStream;
use futures_rustls::TlsConnector;
use rustls::pki_types::ServerName;

use super::connection::CountedStream;
use super::stats::ConnectionError;

/// The host part of `host:port` (`[v6]:port` included) as the name the broker's certificate
/// must carry: a DNS name, or an IP address matched against the certificate's IP entries.
fn server_name(address: &str) -> Option<ServerName<'static>> {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_string()).ok()
}

/// Runs the TLS handshake over a connected socket. Within the engine's connection setup
/// deadline: `Connected` is only reported once this is done.
pub(super) async fn handshake(
    config: &Arc<rustls::ClientConfig>,
    address: &str,
    stream: CountedStream,
) -> Result<TlsStream<CountedStream>, ConnectionError> {
    let Some(name) = server_name(address) else {
        return Err(ConnectionError::Tls {
            reason: format!("the host of {address} is not a name TLS can check"),
        });
    };
    let has_client_certificate = config.client_auth_cert_resolver.has_certs();
    TlsConnector::from(config.clone())
        .connect(name, stream)
        .await
        .map_err(|err| match tls_refusal(&err, has_client_certificate) {
            Some(reason) => ConnectionError::Tls { reason },
            // The socket failed or the peer broke the protocol: a connection failure like any
            // other, retried after the reconnect backoff.
            None => ConnectionError::Connect {
                address: address.to_string(),
                kind: err.kind(),
                message: format!("TLS handshake: {err}"),
            },
        })
}

/// Why a TLS error means the broker and the producer cannot agree, which no retry changes:
/// a certificate refused on either side, or no common version or suite. Other errors (a reset
/// socket, a malformed record) are not refusals and get `None`.
pub(super) fn tls_refusal(err: &io::Error, has_client_certificate: bool) -> Option<String> {
    use rustls::AlertDescription as Alert;
    let tls = err.get_ref()?.downcast_ref::<rustls::Error>()?;
    match tls {
        rustls::Error::InvalidCertificate(certificate) => {
            use rustls::CertificateError as E;
            let why = match certificate {
                E::UnknownIssuer => {
                    " (no authority in the truststore issued it: check `ssl.truststore.*`)"
                }
                E::NotValidForName | E::NotValidForNameContext { .. } => {
                    " (it does not name the host the producer connected to; \
                     `ssl.endpoint.identification.algorithm=` turns this check off)"
                }
                E::Expired | E::ExpiredContext { .. } => " (it has expired)",
                _ => "",
            };
            Some(format!("the broker's certificate was refused: {tls}{why}"))
        }
        rustls::Error::NoCertificatesPresented => {
            Some("the broker presented no certificate".to_string())
        }
        rustls::Error::PeerIncompatible(_) => Some(format!(
            "the broker and the producer share no TLS version or cipher suite: {tls}"
        )),
        rustls::Error::AlertReceived(alert)
            if matches!(
                alert,
                Alert::BadCertificate
                    | Alert::UnsupportedCertificate
                    | Alert::CertificateRevoked
                    | Alert::CertificateExpired
                    | Alert::CertificateUnknown
                    | Alert::UnknownCA
                    | Alert::AccessDenied
                    | Alert::HandshakeFailure
                    | Alert::ProtocolVersion
                    | Alert::InsufficientSecurity
                    | Alert::CertificateRequired
            ) =>
        {
            let hint = match (alert, has_client_certificate) {
                // TLS 1.3 names the absence; TLS 1.2 brokers answer it with handshake_failure.
                (Alert::CertificateRequired, _) | (Alert::HandshakeFailure, false) => {
                    "; the broker requires a client certificate: set `ssl.keystore.location` or \
                     `ssl.keystore.certificate.chain` and `ssl.keystore.key`"
                }
                (
                    Alert::BadCertificate
                    | Alert::UnknownCA
                    | Alert::CertificateUnknown
                    | Alert::CertificateExpired
                    | Alert::CertificateRevoked
                    | Alert::UnsupportedCertificate,
                    true,
                ) => "; the broker refused the producer's client certificate (`ssl.keystore.*`)",
                _ => "",
            };
            Some(format!(
                "the broker refused the TLS session ({alert:?}){hint}"
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_server_name_is_the_host_of_the_address() {
        let name = |address| server_name(address).map(|n| n.to_str().into_owned());
        assert_eq!(
            name("broker1.example.com:9093").as_deref(),
            Some("broker1.example.com")
        );
        assert!(matches!(
            server_name("127.0.0.1:9093"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]:9093"),
            Some(ServerName::IpAddress(_))
        ));
        assert_eq!(name("bad host:9093"), None);
    }

    #[test]
    fn only_refusals_no_retry_changes_are_tls_errors() {
        use rustls::{AlertDescription, CertificateError};
        let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let unknown = wrap(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        let reason = tls_refusal(&unknown, false).expect("a refusal");
        assert!(reason.contains("ssl.truststore"), "{reason}");
        let required = wrap(rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired,
        ));
        let reason = tls_refusal(&required, false).expect("a refusal");
        assert!(reason.contains("requires a client certificate"), "{reason}");
        let bad = wrap(rustls::Error::AlertReceived(
            AlertDescription::BadCertificate,
        ));
        let reason = tls_refusal(&bad, true).expect("a refusal");
        assert!(
            reason.contains("refused the producer's client certificate"),
            "{reason}"
        );
        // A broken peer or socket is retried like any failed connection.
        for retried in [
            wrap(rustls::Error::AlertReceived(
                AlertDescription::InternalError,
            )),
            wrap(rustls::Error::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType,
            )),
            io::Error::new(io::ErrorKind::ConnectionReset, "reset"),
        ] {
            assert_eq!(tls_refusal(&retried, false), None, "{retried}");
        }
    }
}
