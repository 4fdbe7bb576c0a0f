//! Where the executors are (`CHIME_EXECUTOR_ENDPOINTS`) and one lazy gRPC channel to each:
//! schedulers hand keys to them, executors forward worker deliveries to each other.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::RwLock;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// Where the executors are: `CHIME_EXECUTOR_ENDPOINTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoints {
    /// Fixed URLs (`http://10.0.0.5:50061,http://10.0.0.6:50061`).
    Static(Vec<String>),
    /// One DNS name (`chime-executor.chime.svc:50061`, or `dns:///…`), resolved to every
    /// address it has and re-resolved periodically: a Kubernetes headless Service.
    Dns { host: String, port: u16 },
}

/// Why the configured executor endpoints are unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointsError {
    #[error(
        "no executors configured: set CHIME_EXECUTOR_ENDPOINTS (comma-separated URLs, \
         or one DNS name such as chime-executor:50061)"
    )]
    Missing,
    #[error("executor endpoint {endpoint:?}: {problem}")]
    Invalid { endpoint: String, problem: String },
}

impl EndpointsError {
    fn invalid(endpoint: &str, problem: impl std::fmt::Display) -> Self {
        Self::Invalid {
            endpoint: endpoint.to_owned(),
            problem: problem.to_string(),
        }
    }
}

impl Endpoints {
    /// Reads the configured list: URLs with a scheme are static; a single `host:port` (or
    /// `dns:///host:port`) is a DNS name.
    pub fn parse(list: &[String]) -> Result<Self, EndpointsError> {
        match list {
            [] => Err(EndpointsError::Missing),
            [one] if !one.contains("://") || one.starts_with("dns://") => {
                let target = one.trim_start_matches("dns://").trim_start_matches('/');
                let (host, port) = target
                    .rsplit_once(':')
                    .ok_or_else(|| EndpointsError::invalid(one, "expected host:port"))?;
                let port = port
                    .parse()
                    .map_err(|_| EndpointsError::invalid(one, format!("bad port {port:?}")))?;
                if host.is_empty() {
                    return Err(EndpointsError::invalid(one, "no host"));
                }
                Ok(Self::Dns {
                    host: host.to_owned(),
                    port,
                })
            }
            many => {
                for url in many {
                    Endpoint::from_shared(url.clone())
                        .map_err(|e| EndpointsError::invalid(url, e))?;
                    if !url.contains("://") {
                        return Err(EndpointsError::invalid(
                            url,
                            "a list needs URLs such as http://host:50061",
                        ));
                    }
                }
                Ok(Self::Static(many.to_vec()))
            }
        }
    }
}

/// One executor: its URL and a channel to it (lazy; it reconnects by itself).
#[derive(Clone)]
pub struct Replica {
    pub target: String,
    pub channel: Channel,
}

/// The executors as resolved now.
pub struct Fleet {
    endpoints: Endpoints,
    replicas: RwLock<Arc<Vec<Replica>>>,
    call_timeout: Duration,
    /// TLS (trusting `tls.ca`, presenting this service's certificate) for `https://`
    /// endpoints, and for every resolved address of a DNS endpoint.
    tls: Option<ClientTlsConfig>,
}

impl Fleet {
    /// Starts with the endpoints resolved now; a DNS name that does not resolve yet (no
    /// executor is up) starts empty and is retried by [`Self::keep_resolving`]. Calls time
    /// out after `call_timeout`.
    pub async fn new(
        endpoints: Endpoints,
        tls: Option<ClientTlsConfig>,
        call_timeout: Duration,
    ) -> Arc<Self> {
        let this = Arc::new(Self {
            endpoints,
            replicas: RwLock::new(Arc::new(Vec::new())),
            call_timeout,
            tls,
        });
        if let Err(e) = this.refresh().await {
            tracing::warn!(error = %e, "no executors yet");
        }
        this
    }

    /// Re-resolves a DNS endpoint every `every` until `stop`; static lists never change.
    pub fn keep_resolving(
        self: &Arc<Self>,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        if matches!(self.endpoints, Endpoints::Static(_)) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(every) => {}
                }
                if let Err(e) = this.refresh().await {
                    tracing::warn!(error = %e, "cannot resolve executors; keeping the last list");
                }
            }
        });
    }

    /// The executors now.
    pub async fn replicas(&self) -> Arc<Vec<Replica>> {
        self.replicas.read().await.clone()
    }

    /// Their URLs.
    pub async fn targets(&self) -> Vec<String> {
        self.replicas()
            .await
            .iter()
            .map(|r| r.target.clone())
            .collect()
    }

    async fn refresh(&self) -> Result<(), String> {
        let targets: Vec<String> = match &self.endpoints {
            Endpoints::Static(urls) => urls.clone(),
            Endpoints::Dns { host, port } => {
                let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), *port))
                    .await
                    .map_err(|e| format!("resolving {host}:{port}: {e}"))?
                    .collect();
                addrs.sort();
                addrs.dedup();
                if addrs.is_empty() {
                    return Err(format!("{host}:{port} resolves to no address"));
                }
                let scheme = if self.tls.is_some() { "https" } else { "http" };
                addrs.iter().map(|a| format!("{scheme}://{a}")).collect()
            }
        };
        let current = self.replicas.read().await.clone();
        if current.iter().map(|r| &r.target).eq(targets.iter()) {
            return Ok(());
        }
        let mut replicas = Vec::with_capacity(targets.len());
        for target in targets {
            // Keep an existing channel (and its connection) for a target that stays.
            let channel = match current.iter().find(|r| r.target == target) {
                Some(r) => r.channel.clone(),
                None => {
                    let mut endpoint = Endpoint::from_shared(target.clone())
                        .map_err(|e| format!("executor endpoint {target:?}: {e}"))?
                        .connect_timeout(Duration::from_millis(500))
                        .timeout(self.call_timeout)
                        .tcp_nodelay(true);
                    if let Some(tls) = self.tls.clone().filter(|_| target.starts_with("https://")) {
                        // A resolved address is checked against the DNS name's certificate.
                        let tls = match &self.endpoints {
                            Endpoints::Dns { host, .. } => tls.domain_name(host.clone()),
                            Endpoints::Static(_) => tls,
                        };
                        endpoint = endpoint
                            .tls_config(tls)
                            .map_err(|e| format!("executor endpoint {target:?}: {e}"))?;
                    }
                    endpoint.connect_lazy()
                }
            };
            replicas.push(Replica { target, channel });
        }
        tracing::info!(executors = ?replicas.iter().map(|r| &r.target).collect::<Vec<_>>(), "executor endpoints");
        *self.replicas.write().await = Arc::new(replicas);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }
    #[test]
    fn endpoints_are_urls_or_one_dns_name() {
        assert_eq!(
            Endpoints::parse(&list(&["http://a:1", "http://b:2"])),
            Ok(Endpoints::Static(list(&["http://a:1", "http://b:2"])))
        );
        assert_eq!(
            Endpoints::parse(&list(&["http://a:1"])),
            Ok(Endpoints::Static(list(&["http://a:1"])))
        );
        assert_eq!(
            Endpoints::parse(&list(&["chime-executor.chime.svc:50061"])),
            Ok(Endpoints::Dns {
                host: "chime-executor.chime.svc".into(),
                port: 50061
            })
        );
        assert_eq!(
            Endpoints::parse(&list(&["dns:///exec:7"])),
            Ok(Endpoints::Dns {
                host: "exec".into(),
                port: 7
            })
        );
        assert!(Endpoints::parse(&[]).is_err());
        assert!(Endpoints::parse(&list(&["exec"])).is_err());
        assert!(Endpoints::parse(&list(&["exec:port"])).is_err());
        assert!(Endpoints::parse(&list(&["a:1", "b:2"])).is_err());
    }

    #[tokio::test]
    async fn a_dns_name_becomes_one_target_per_address() {
        let dns = |host: &str, port| Endpoints::Dns {
            host: host.into(),
            port,
        };
        let timeout = Duration::from_secs(1);
        let fleet = Fleet::new(dns("127.0.0.1", 50061), None, timeout).await;
        assert_eq!(fleet.targets().await, vec!["http://127.0.0.1:50061"]);
        let missing = Fleet::new(dns("no-such-host.invalid", 1), None, timeout).await;
        assert!(missing.targets().await.is_empty());
    }
}
