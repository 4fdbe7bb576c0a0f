//! Chime's gRPC API, generated from `proto/chime/v1`.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("chime.v1");
}

/// Encoded descriptors of every Chime service, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("chime_descriptor");
