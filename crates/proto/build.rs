//! Generates the gRPC code from `proto/chime/v1` with the vendored protoc, so building needs
//! no system protoc, and writes the descriptor set that gRPC reflection serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let protos = [
        root.join("chime/v1/timer.proto"),
        root.join("chime/v1/executor.proto"),
        root.join("chime/v1/worker.proto"),
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // No `Client::connect` constructors: `WorkerService/Connect` would clash with them.
    // Clients are built on a `Channel` (`Client::new`).
    tonic_prost_build::configure()
        .build_transport(false)
        .file_descriptor_set_path(out.join("chime_descriptor.bin"))
        .compile_with_config(
            config,
            &protos,
            &[root, protoc_bin_vendored::include_path()?],
        )?;
    Ok(())
}
