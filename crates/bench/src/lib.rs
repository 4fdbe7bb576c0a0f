//! chime-bench's reusable parts: a loopback callback sink that records what Chime delivers,
//! and the helpers that run Chime's binaries as processes; the end-to-end tests use both.

pub mod deploy;
pub mod measure;
/// The callback sink, shared with the tests.
pub use chime_test_support::sink;
