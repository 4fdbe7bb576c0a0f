//! Where the executors are and one lazy gRPC channel to each: schedulers hand keys to them
//! (`CHIME_EXECUTOR_ENDPOINTS`), executors forward worker deliveries to each other (the
//! configured endpoints if set, else the `executors` membership roster: [`Fleet::join_roster`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use chime_storage::Membership;
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// The membership group executors announce themselves in ([`Fleet::join_roster`]) and
/// schedulers without configured endpoints follow ([`Fleet::follow_roster`]).
pub const EXECUTORS_GROUP: &str = "executors";

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
    /// The configured list [parsed](Self::parse), or `None` when nothing is configured: the
    /// fleet is then the `executors` roster ([`Fleet::join_roster`], [`Fleet::follow_roster`]).
    pub fn configured(list: &[String]) -> Result<Option<Self>, EndpointsError> {
        match list.is_empty() {
            true => Ok(None),
            false => Self::parse(list).map(Some),
        }
    }

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

    /// Finds the executors through the membership roster rather than configured endpoints:
    /// heartbeats `me` (this executor's URL as its peers reach it, [`advertised_url`]) in
    /// group `group` every `settings.heartbeat`, and makes the other live members the
    /// fleet, until `stop`; then leaves the group at once, so peers stop forwarding to it.
    pub fn join_roster(
        self: &Arc<Self>,
        membership: Arc<dyn Membership>,
        group: &'static str,
        me: String,
        settings: crate::RosterSettings,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            tracing::info!(group, me = %me, "announcing this executor in the roster");
            this.track(settings.heartbeat, &stop, || async {
                let members = membership.heartbeat(group, &me, settings.ttl).await?;
                Ok(members.into_iter().filter(|m| *m != me).collect())
            })
            .await;
            if let Err(e) = membership.leave(group, &me).await {
                tracing::warn!(group, error = %e, "cannot leave the roster; it will lapse");
            }
        })
    }

    /// Follows the executors through the roster they announce themselves in, without
    /// joining it: every `every`, the live members of `group` become the fleet, until `stop`.
    pub fn follow_roster(
        self: &Arc<Self>,
        membership: Arc<dyn Membership>,
        group: &'static str,
        every: Duration,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            this.track(every, &stop, || membership.members(group)).await;
        })
    }

    /// Makes what `read` returns the fleet, every `every` until `stop`. A failed read keeps
    /// the last list: a peer gone meanwhile only fails the calls made to it.
    async fn track<F>(&self, every: Duration, stop: &CancellationToken, mut read: impl FnMut() -> F)
    where
        F: std::future::Future<Output = chime_storage::StoreResult<Vec<String>>>,
    {
        loop {
            match read().await {
                Ok(members) => {
                    if let Err(e) = self.apply(members).await {
                        tracing::warn!(error = %e, "a roster member is no URL");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the executors roster"),
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
        }
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
        self.apply(targets).await
    }

    /// Makes `targets` the executors, keeping the channels of those that stay.
    async fn apply(&self, targets: Vec<String>) -> Result<(), String> {
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

/// The URL peers reach an executor listening on `addr` at: `configured` if given, else
/// `addr` itself, with this machine's address in place of an unspecified IP (`0.0.0.0`):
/// the one its default route leaves from (a pod's IP in Kubernetes), or loopback.
pub fn advertised_url(configured: Option<&str>, addr: SocketAddr, tls: bool) -> String {
    if let Some(url) = configured {
        return url.to_owned();
    }
    let ip = if addr.ip().is_unspecified() {
        own_ip().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    } else {
        addr.ip()
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
}

/// The local address of a route to a private address: connecting a UDP socket sends
/// nothing, it only picks the interface.
fn own_ip() -> Option<IpAddr> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect((Ipv4Addr::new(10, 255, 255, 255), 9)).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
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
        // Nothing configured is no error: the fleet is the roster then.
        assert_eq!(Endpoints::configured(&[]), Ok(None));
        assert!(Endpoints::configured(&list(&["a:1", "b:2"])).is_err());
    }

    #[test]
    fn an_executor_advertises_a_reachable_url() {
        let on = |a: &str| a.parse::<SocketAddr>().unwrap();
        assert_eq!(
            advertised_url(Some("http://exec-1:7"), on("0.0.0.0:50061"), false),
            "http://exec-1:7"
        );
        assert_eq!(
            advertised_url(None, on("127.0.0.1:50061"), false),
            "http://127.0.0.1:50061"
        );
        assert_eq!(
            advertised_url(None, on("10.1.2.3:50061"), true),
            "https://10.1.2.3:50061"
        );
        let any = advertised_url(None, on("0.0.0.0:50061"), false);
        assert!(!any.contains("0.0.0.0"), "{any}");
        assert!(any.ends_with(":50061"), "{any}");
    }

    /// Polls `fleet`'s targets until they are `want` (within 5 s).
    async fn until_targets(fleet: &Fleet, want: &[&str]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let now = fleet.targets().await;
            if now == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "targets {now:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn executors_find_each_other_in_the_roster_and_leave_it_on_stop() {
        let clock: Arc<dyn chime_domain::Clock> = Arc::new(chime_domain::SystemClock);
        let membership: Arc<dyn Membership> =
            Arc::new(chime_storage::memory::MemoryLeases::new(clock));
        let settings = crate::RosterSettings {
            heartbeat: Duration::from_millis(20),
            ttl: Duration::from_secs(5),
        };
        let empty = || Endpoints::Static(Vec::new());
        let timeout = Duration::from_secs(1);
        let (a, b) = (
            Fleet::new(empty(), None, timeout).await,
            Fleet::new(empty(), None, timeout).await,
        );
        let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
        let (url_a, url_b) = ("http://127.0.0.1:1", "http://127.0.0.1:2");
        let joined_a = a.join_roster(
            membership.clone(),
            "executors",
            url_a.into(),
            settings,
            stop_a.clone(),
        );
        b.join_roster(
            membership.clone(),
            "executors",
            url_b.into(),
            settings,
            stop_b.clone(),
        );
        until_targets(&a, &[url_b]).await;
        until_targets(&b, &[url_a]).await;
        stop_a.cancel();
        joined_a.await.unwrap();
        // Left at once, not after its 5-s lapse.
        until_targets(&b, &[]).await;
        stop_b.cancel();
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
