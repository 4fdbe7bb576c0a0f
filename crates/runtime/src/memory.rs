//! How the services' memory comes from the kernel.
//!
//! mimalloc asks for transparent huge pages on its arenas (`madvise(MADV_HUGEPAGE)`), so the
//! first touch of each fresh 2-MiB range faults in a whole huge page, which the kernel
//! zeroes. When a burst starts, an executor takes memory for thousands of callbacks and
//! their connections at once: zeroing those pages was ~16 % of its CPU while a 20,000 burst
//! drained. Without huge pages the executors' CPU per firing fell by a fifth, the
//! schedulers' by half, and the drain rose by a third (docs/performance.md). The services
//! hold a few hundred MiB at most, where huge pages save little in TLB misses, and a huge
//! page held for a few live objects also inflates the resident size. An environment
//! variable (`MIMALLOC_ALLOW_THP=0`) would do the same, but only where every deployment
//! remembers to set it.

/// Turns transparent huge pages off for this process (and what it starts), whatever its
/// allocator advises. [`crate::CommonArgs::run_over`] (which `run` goes through) calls it
/// before the runtime starts, so every service and `chime dev` run so; a kernel that
/// refuses is reported on stderr and changes nothing else.
pub fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        eprintln!("chime: transparent huge pages stay on: {e}");
    }
}

/// Whether transparent huge pages are off for the process `pid` (Linux's
/// `/proc/{pid}/status`, `THP_enabled`); `None` where the kernel does not say.
pub fn huge_pages_off(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim() == "0")
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn turns_huge_pages_off_for_the_process() {
        let me = std::process::id();
        if huge_pages_off(me).is_none() {
            eprintln!("skipped: this kernel does not report THP_enabled");
            return;
        }
        without_huge_pages();
        assert_eq!(huge_pages_off(me), Some(true));
    }
}
