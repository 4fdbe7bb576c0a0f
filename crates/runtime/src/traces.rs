//! OpenTelemetry traces: exported over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` is set
//! (the standard variables also name the service, `OTEL_SERVICE_NAME`, and pick the sampler,
//! `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`), off otherwise. W3C `traceparent`
//! carries a firing's context from the scheduler's hand-off over gRPC metadata into the
//! executor and on to the callee, so one hand-off and its callbacks are one trace.

use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The tracing layer that exports spans, when an OTLP endpoint is configured.
pub(crate) fn otlp_layer<S>()
-> Option<tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok()?;
    if endpoint.trim().is_empty() {
        return None;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}: cannot export traces: {e}");
            return None;
        }
    };
    let mut provider = SdkTracerProvider::builder().with_batch_exporter(exporter);
    // OTEL_SERVICE_NAME, when set, names the service; otherwise the binary does.
    if std::env::var_os("OTEL_SERVICE_NAME").is_none()
        && let Some(binary) = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    {
        provider = provider.with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(binary)
                .build(),
        );
    }
    let provider = provider.build();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    use opentelemetry::trace::TracerProvider as _;
    let tracer = provider.tracer("chime");
    let _ = PROVIDER.set(provider);
    Some(tracing_opentelemetry::layer().with_tracer(tracer))
}

/// Whether spans are exported; without it the propagation helpers below do nothing, so a
/// firing pays no more than its (unexported) spans. Per-firing spans that only tracing
/// would read are made at `debug` when this is false.
pub fn traces_exported() -> bool {
    PROVIDER.get().is_some()
}

/// Sends the spans still buffered; every binary calls it before it exits.
pub fn flush_traces() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown();
    }
}

/// Headers or gRPC metadata as the propagator sees them.
struct Headers<'a>(&'a mut http::HeaderMap);

impl Injector for Headers<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            http::header::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct ReadHeaders<'a>(&'a http::HeaderMap);

impl Extractor for ReadHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Writes `span`'s context (`traceparent`) into `headers`; nothing when tracing is off.
pub fn inject_context(span: &tracing::Span, headers: &mut http::HeaderMap) {
    if !traces_exported() {
        return;
    }
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut Headers(headers))
    });
}

/// Makes the context a gRPC request's metadata carries (`traceparent`) the parent of `span`.
pub fn adopt_context(span: &tracing::Span, metadata: &tonic::metadata::MetadataMap) {
    if !traces_exported() {
        return;
    }
    let headers = metadata.clone().into_headers();
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&ReadHeaders(&headers)));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// Records `span`'s trace and span ids in its `trace_id` and `span_id` fields, so JSON logs
/// written inside it carry them; nothing when tracing is off.
pub fn record_ids(span: &tracing::Span) {
    if !traces_exported() {
        return;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if sc.is_valid() {
        span.record("trace_id", tracing::field::display(sc.trace_id()));
        span.record("span_id", tracing::field::display(sc.span_id()));
    }
}
