//! Which build a process is: its version and the git commit it was built from, for
//! `--version`, `/healthz` and the `chime_build_info` metric.
//!
//! The commit comes from `CHIME_COMMIT` at build time (the Makefile and the image build set
//! it from git). [`build_info!`](crate::build_info) reads it where it expands, in each
//! binary's `main.rs`: a new commit rebuilds the binaries, not the libraries under them.

use std::sync::OnceLock;

/// A binary's version and commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BuildInfo {
    pub version: &'static str,
    /// The git commit, `unknown` when built without `CHIME_COMMIT`.
    pub commit: &'static str,
}

/// This binary's [`BuildInfo`]; expand it in the binary's own crate.
#[macro_export]
macro_rules! build_info {
    () => {
        $crate::BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            commit: match option_env!("CHIME_COMMIT") {
                Some(commit) if !commit.is_empty() => commit,
                _ => "unknown",
            },
        }
    };
}

static CURRENT: OnceLock<(BuildInfo, String)> = OnceLock::new();

impl BuildInfo {
    /// Records this as the process's build (the first call wins) and returns the line
    /// `--version` prints: `0.1.0 (commit 1a2b3c…)`. Call it where clap asks for the
    /// version: `#[command(version = chime_runtime::build_info!().register())]`.
    pub fn register(self) -> &'static str {
        let (_, line) = CURRENT.get_or_init(|| {
            let line = format!("{} (commit {})", self.version, self.commit);
            (self, line)
        });
        line
    }

    /// The process's build; the library's own version when no binary registered one.
    pub fn current() -> BuildInfo {
        CURRENT.get().map_or(
            BuildInfo {
                version: env!("CARGO_PKG_VERSION"),
                commit: "unknown",
            },
            |(info, _)| *info,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::BuildInfo;

    #[test]
    fn the_first_registration_is_the_process_build() {
        let first = BuildInfo {
            version: "1.2.3",
            commit: "abc123",
        };
        assert_eq!(first.register(), "1.2.3 (commit abc123)");
        let later = BuildInfo {
            version: "9.9.9",
            commit: "other",
        };
        assert_eq!(later.register(), "1.2.3 (commit abc123)");
        assert_eq!(BuildInfo::current(), first);
    }
}
