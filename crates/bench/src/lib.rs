//! chime-bench's reusable part: a loopback callback sink that records what Chime delivers,
//! used by the pipeline benchmark and by the tests that receive real callbacks.

pub mod sink;
