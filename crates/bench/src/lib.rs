//! chime-bench's reusable parts: measuring, and (from `chime-test-support`, shared with the
//! tests) the loopback callback sink and the binaries run as processes.

pub mod callbacks;
pub use chime_test_support::deploy;
pub mod measure;
/// The callback sink, shared with the tests.
pub use chime_test_support::sink;
