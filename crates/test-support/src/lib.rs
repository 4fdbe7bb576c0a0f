//! Test support shared by the component tests, the end-to-end tests and the benchmarks, so
//! none of them depends on another's crate for it: the loopback callback sink that counts
//! lost and duplicated deliveries from what it received, and Chime's binaries run as
//! processes.

pub mod deploy;
pub mod pki;
pub mod ports;
pub mod sink;
