//! A loopback HTTP server standing in for the services Chime calls back. It records every
//! request with its arrival time (by the system clock, the same clock Chime schedules by),
//! so tests and benchmarks judge delivery from the receiver's side.
//!
//! Paths steer the answer: `/status/{code}` answers that status, `/delay/{ms}` waits first,
//! `/flaky/{n}` answers 500 to the first `n` requests of each `Idempotency-Key` and 200 after,
//! `/switch` answers 500 until [`Sink::set_healthy`]; anything else answers 200 `ok`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::routing::any;
use axum::serve::ListenerExt;
use tokio_util::sync::CancellationToken;

/// One request the sink received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Unix ms when the request's headers arrived.
    pub at_ms: i64,
    pub method: String,
    pub path: String,
    /// Lowercase names.
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

type Log = Arc<Mutex<Vec<Received>>>;

/// Connections waiting to be accepted; the kernel caps it at `net.core.somaxconn`.
const ACCEPT_BACKLOG: u32 = 8192;

#[derive(Clone, Default)]
struct Shared {
    log: Log,
    /// `/delay/{ms}` requests as they arrive: one the caller aborts before the delay ends
    /// is here and not in `log` (the server drops its handler when the caller hangs up).
    started: Log,
    healthy: Arc<std::sync::atomic::AtomicBool>,
    /// Keep only Chime's own headers and no body: a benchmark receiving hundreds of
    /// thousands of callbacks should not spend its CPU and memory on the rest.
    lean: bool,
    /// TCP connections accepted, to tell reused connections from new ones.
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

pub struct Sink {
    addr: SocketAddr,
    state: Shared,
    stop: CancellationToken,
    tls: bool,
}

/// What the sink answers on each path.
fn router(state: Shared) -> Router {
    Router::new()
        .route("/status/{code}", any(status))
        .route("/delay/{ms}", any(delay))
        .route("/flaky/{n}", any(flaky))
        .route("/switch", any(switch))
        .fallback(any(ok))
        .with_state(state)
}

impl Sink {
    /// Listens on an ephemeral loopback port.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(false).await
    }

    /// Like [`Sink::start`], but records only `Idempotency-Key` and the `X-Chime-*` headers
    /// of each request, and not its body.
    pub async fn start_lean() -> std::io::Result<Self> {
        Self::start_with(true).await
    }

    /// Like [`Sink::start`], over TLS with `tls`'s certificate (for `localhost`):
    /// [`Sink::url`] is then `https://localhost:{port}{path}`.
    pub async fn start_tls(tls: &chime_runtime::Tls) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let listener = tls
            .rest_listener(listener)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Self::serve(listener, addr, Shared::default(), true))
    }

    async fn start_with(lean: bool) -> std::io::Result<Self> {
        // A deep accept queue, as a service taking bursts would have: with tokio's 1,024 a
        // burst's first wave (every executor connecting at once) overflowed it, and each
        // dropped SYN came back a second later.
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let listener = socket.listen(ACCEPT_BACKLOG)?;
        let addr = listener.local_addr()?;
        let state = Shared {
            lean,
            ..Shared::default()
        };
        let connections = state.connections.clone();
        let listener = chime_runtime::without_nagle(listener).tap_io(move |_| {
            connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        Ok(Self::serve(listener, addr, state, false))
    }

    /// Answers on `listener` until dropped.
    fn serve<L>(listener: L, addr: SocketAddr, state: Shared, tls: bool) -> Self
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let stop = CancellationToken::new();
        let (app, shutdown) = (router(state.clone()), stop.clone().cancelled_owned());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await;
        });
        Self {
            addr,
            state,
            stop,
            tls,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:{port}{path}`, or `https://localhost:{port}{path}` over TLS.
    pub fn url(&self, path: &str) -> String {
        match self.tls {
            false => format!("http://{}{path}", self.addr),
            true => format!("https://localhost:{}{path}", self.addr.port()),
        }
    }

    /// Everything received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.state.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Everything received so far, in arrival order, taken out of the log: a long benchmark
    /// reads its callbacks phase by phase and keeps its memory bounded.
    pub fn take(&self) -> Vec<Received> {
        self.state
            .log
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }

    /// `/delay/{ms}` requests as they arrived, answered or not.
    pub fn started(&self) -> Vec<Received> {
        self.state
            .started
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// How many of `expected` (idempotency keys) have not arrived: counted under the lock,
    /// so a test polling a large log does not copy it each time.
    pub fn missing(&self, expected: &std::collections::HashSet<String>) -> usize {
        let Ok(log) = self.state.log.lock() else {
            return expected.len();
        };
        let got: std::collections::HashSet<&str> = log
            .iter()
            .filter_map(|r| r.header("idempotency-key"))
            .collect();
        expected
            .iter()
            .filter(|k| !got.contains(k.as_str()))
            .count()
    }

    pub fn count(&self) -> usize {
        self.state.log.lock().map(|l| l.len()).unwrap_or_default()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state
            .connections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `/switch` answers 200 (else 500).
    pub fn set_healthy(&self, healthy: bool) {
        self.state
            .healthy
            .store(healthy, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Unix ms by the system clock, the one Chime schedules by.
fn now_ms() -> i64 {
    use chime_domain::Clock;
    chime_domain::SystemClock.now().as_millis()
}

fn record(
    shared: &Shared,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    at_ms: i64,
) {
    record_in(&shared.log, shared, method, uri, headers, body, at_ms);
}

fn record_in(
    log: &Log,
    shared: &Shared,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    at_ms: i64,
) {
    let keep =
        |name: &str| !shared.lean || name == "idempotency-key" || name.starts_with("x-chime-");
    let received = Received {
        at_ms,
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .filter(|(k, _)| keep(k.as_str()))
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: if shared.lean {
            String::new()
        } else {
            String::from_utf8_lossy(&body).into_owned()
        },
    };
    if let Ok(mut l) = log.lock() {
        l.push(received);
    }
}

async fn ok(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    record(&shared, method, &uri, &headers, body, now_ms());
    "ok"
}

async fn status(
    State(shared): State<Shared>,
    Path(code): Path<u16>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    record(&shared, method, &uri, &headers, body, now_ms());
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

async fn delay(
    State(shared): State<Shared>,
    Path(ms): Path<u64>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    let at = now_ms();
    record_in(
        &shared.started,
        &shared,
        method.clone(),
        &uri,
        &headers,
        Bytes::new(),
        at,
    );
    tokio::time::sleep(Duration::from_millis(ms)).await;
    record(&shared, method, &uri, &headers, body, at);
    "ok"
}

async fn flaky(
    State(shared): State<Shared>,
    Path(n): Path<usize>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    record(&shared, method, &uri, &headers, body, now_ms());
    let seen = shared
        .log
        .lock()
        .map(|l| {
            l.iter()
                .filter(|r| r.headers.get("idempotency-key") == key.as_ref())
                .count()
        })
        .unwrap_or(0);
    if seen > n {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

async fn switch(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    record(&shared, method, &uri, &headers, body, now_ms());
    if shared.healthy.load(std::sync::atomic::Ordering::SeqCst) {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}
