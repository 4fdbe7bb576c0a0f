//! Chime's gRPC API, generated from `proto/chime/v1`.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("chime.v1");
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
