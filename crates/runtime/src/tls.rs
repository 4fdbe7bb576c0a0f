//! TLS for Chime's servers and its internal gRPC client, from the `[tls]` PEM files: the
//! gateway's REST and gRPC, every gRPC server (requiring client certificates when
//! `tls.client_ca` is set: mutual TLS), and the scheduler's calls to executors. The admin
//! ports (`/healthz`, `/readyz`, `/metrics`) stay plain HTTP for probes and scrapers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::{ConfigError, TlsConfig};

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes finished and not yet taken by the server.
const READY_BACKLOG: usize = 1024;

/// The PEM contents of `[tls]`, read once at start-up.
#[derive(Clone)]
pub struct Tls {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
    ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Tls")
            .field("mutual", &self.client_ca.is_some())
            .finish_non_exhaustive()
    }
}

fn read(what: &str, path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| {
        ConfigError::Invalid(format!("tls.{what}: cannot read {}: {e}", path.display()))
    })
}

impl Tls {
    /// `None` when no certificate is configured (plain TCP). Refuses unreadable files and
    /// PEM that holds no certificate or key, naming the setting.
    pub fn load(config: &TlsConfig) -> Result<Option<Self>, ConfigError> {
        let (Some(cert), Some(key)) = (&config.cert, &config.key) else {
            return Ok(None);
        };
        let tls = Self {
            cert: read("cert", cert)?,
            key: read("key", key)?,
            client_ca: config
                .client_ca
                .as_deref()
                .map(|p| read("client_ca", p))
                .transpose()?,
            ca: config.ca.as_deref().map(|p| read("ca", p)).transpose()?,
        };
        // Parse now, so a bad file stops the service at start-up rather than at a handshake.
        tls.server_config()?;
        Ok(Some(tls))
    }

    /// From PEM bytes, for tests and embedders.
    pub fn from_pem(
        cert: Vec<u8>,
        key: Vec<u8>,
        client_ca: Option<Vec<u8>>,
        ca: Option<Vec<u8>>,
    ) -> Result<Self, ConfigError> {
        let tls = Self {
            cert,
            key,
            client_ca,
            ca,
        };
        tls.server_config()?;
        Ok(tls)
    }

    fn server_config(&self) -> Result<rustls::ServerConfig, ConfigError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| {
            ConfigError::Invalid(format!("tls.{what}: {e}"))
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<_, _>>()
            .map_err(|e| bad("cert", &e))?;
        if certs.is_empty() {
            return Err(bad("cert", &"no certificate in the PEM file"));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(|e| bad("key", &e))?;
        crate::install_crypto_provider();
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| bad("key", &e))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }

    /// Whether this service's gRPC server requires client certificates.
    pub fn mutual(&self) -> bool {
        self.client_ca.is_some()
    }

    /// A gRPC server's TLS: this certificate, and client certificates required when
    /// `tls.client_ca` is set.
    pub fn grpc_server(&self) -> ServerTlsConfig {
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key));
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(ca));
        }
        config
    }

    /// A gRPC client's TLS: trusts `tls.ca` and presents this certificate (for servers that
    /// require one).
    pub fn grpc_client(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key));
        if let Some(ca) = &self.ca {
            config = config.ca_certificate(Certificate::from_pem(ca));
        }
        config
    }

    /// Accepts TLS connections on `listener` for `axum::serve`: handshakes run concurrently
    /// (a slow client does not hold up the others) and are bounded in time.
    pub fn rest_listener(&self, listener: TcpListener) -> Result<TlsListener, ConfigError> {
        let acceptor = TlsAcceptor::from(Arc::new(self.server_config()?));
        let local = listener
            .local_addr()
            .map_err(|e| ConfigError::Invalid(format!("listener: {e}")))?;
        let (ready, rx) = mpsc::channel(READY_BACKLOG);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, handed) = (acceptor.clone(), ready.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = handed.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
                if ready.is_closed() {
                    break;
                }
            }
        });
        Ok(TlsListener { rx, local })
    }
}

/// TLS connections, handshakes done, for `axum::serve`.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended with the listener: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// A gRPC server builder, speaking TLS when `tls` is given.
pub fn grpc_server(tls: Option<&Tls>) -> Result<tonic::transport::Server, tonic::transport::Error> {
    let builder = tonic::transport::Server::builder();
    match tls {
        Some(tls) => builder.tls_config(tls.grpc_server()),
        None => Ok(builder),
    }
}
