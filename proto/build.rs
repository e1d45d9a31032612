//! Generates the tonic/prost code for Quarry's wire contract.
//!
//! protoc comes from the `protoc-bin-vendored` crate, so a fresh machine needs
//! no protobuf compiler of its own.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let protos = [
        "proto/meta.proto",
        "proto/kv.proto",
        "proto/coprocessor.proto",
        "proto/compute.proto",
        "proto/raft.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .bytes(".quarry.coprocessor.CopResponse.data")
        .bytes(".quarry.kv.UploadSstRequest.data")
        .compile_protos(&protos, &["proto"])?;
    Ok(())
}
