//! Chime's gRPC API, generated from `proto/chime/v1`.

pub mod compat;
#[allow(clippy::all, clippy::pedantic, missing_docs)]
mod targets;

pub mod v1 {
    tonic::include_proto!("chime.v1");
}

/// Connections a gRPC server accepts from `listener`, with Nagle's algorithm off. HTTP/2
/// writes a response as several small frames; with Nagle on, the last one waits for the
/// client's delayed ACK, adding about 40 ms to every call on Linux. (tonic's own option
/// is ignored for a listener passed in, so every server goes through here.)
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Encoded descriptors of every Chime service, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("chime_descriptor");

/// The descriptors of the given proto files (e.g. `chime/v1/timer.proto`) and of the
/// well-known types they import, so a server's reflection lists only the services it serves.
pub fn descriptors_of(
    files: &[&str],
) -> Result<prost_types::FileDescriptorSet, prost::DecodeError> {
    use prost::Message;
    let mut set = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET)?;
    set.file
        .retain(|f| f.name().starts_with("google/") || files.contains(&f.name()));
    Ok(set)
}

/// What every Chime gRPC server serves besides its own service: grpc.health.v1, and
/// reflection (v1 and v1alpha) describing `files` plus health and the google.rpc error
/// details clients decode. Returns the health reporter (to flip services to serving) and the
/// routes to add to the server.
pub fn introspection(
    files: &[&str],
) -> Result<(tonic_health::server::HealthReporter, tonic::service::Routes), IntrospectionError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let reflection = || -> Result<_, IntrospectionError> {
        Ok(tonic_reflection::server::Builder::configure()
            .register_file_descriptor_set(descriptors_of(files)?)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET))
    };
    let mut routes = tonic::service::RoutesBuilder::default();
    routes
        .add_service(health)
        .add_service(reflection()?.build_v1()?)
        .add_service(reflection()?.build_v1alpha()?);
    Ok((reporter, routes.routes()))
}

#[derive(Debug, thiserror::Error)]
pub enum IntrospectionError {
    #[error("embedded descriptors do not decode: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("cannot build reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use futures::StreamExt;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = super::incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.nodelay().unwrap());
    }
}

/// A client-side interceptor that sends `authorization: Bearer <token>` with every call
/// (nothing without a token).
#[derive(Clone, Default)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// `None` when the token cannot be sent as a header value.
    pub fn new(token: Option<&str>) -> Option<Self> {
        match token {
            None => Some(Self(None)),
            Some(t) => format!("Bearer {t}").parse().ok().map(|v| Self(Some(v))),
        }
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

/// The timer API's client with a bearer token on every call.
pub type AuthedTimerClient = v1::timer_service_client::TimerServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
>;
