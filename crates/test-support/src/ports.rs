//! Ports for the processes a test or benchmark starts.
//!
//! A port found by binding to port 0 comes from the kernel's ephemeral range, the same range
//! the kernel draws local ports of outgoing connections from: between the pick and the child's
//! own bind, a database or Redis connection of any process could take it (CI saw exactly that:
//! "Address already in use" from an executor). So ports are picked below the ephemeral range,
//! where only explicit binds land, and each is locked (a lock file held until this process
//! exits) so parallel test processes never pick the same one.

// Setup failures end the test or benchmark with a message, by design.
#![allow(clippy::expect_used, clippy::panic)]

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;

/// Where the picks start; below it are well-known services' ports.
const LOWEST: u16 = 10_000;

/// Lock files of the ports this process picked: held until it exits.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// A free loopback port, outside the ephemeral range and not handed to another test process.
pub fn free_port() -> u16 {
    free_port_pair(0)
}

/// A free port `p` such that `p + gap` is free too (a Redis Cluster node's bus listens at
/// port + 10000); both are held. `gap` 0 is a single port.
pub fn free_port_pair(gap: u16) -> u16 {
    let highest = ephemeral_start()
        .checked_sub(gap)
        .filter(|h| *h > LOWEST)
        .unwrap_or_else(|| panic!("no room for a port pair {gap} apart below the ephemeral range"));
    let span = u32::from(highest - LOWEST);
    let start = rand::random::<u32>() % span;
    for i in 0..span {
        // `start + i < 2 * span` and `span < 65536`, so this fits.
        let port = LOWEST + ((start + i) % span) as u16;
        let Some(lock) = reserve(port) else { continue };
        if gap == 0 {
            hold(lock);
            return port;
        }
        if let Some(bus) = reserve(port + gap) {
            hold(lock);
            hold(bus);
            return port;
        }
    }
    panic!("no free port between {LOWEST} and {highest}");
}

/// The port's lock when no other test process holds it and nothing listens on it.
fn reserve(port: u16) -> Option<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_dir().join(format!("{port}.lock")))
        .expect("a port lock file");
    // flock: another open of the same file, in this process or another, is refused.
    file.try_lock().ok()?;
    // Binding 127.0.0.1 also fails when something holds the wildcard address on this port.
    TcpListener::bind(("127.0.0.1", port)).ok()?;
    Some(file)
}

fn hold(lock: File) {
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
}

fn lock_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("chime-test-ports");
    std::fs::create_dir_all(&dir).expect("the port lock directory");
    dir
}

/// The first port of the kernel's ephemeral range (32768 by default on Linux).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_distinct_below_the_ephemeral_range_and_locked() {
        let a = free_port();
        let b = free_port();
        assert_ne!(a, b);
        for p in [a, b] {
            assert!((LOWEST..ephemeral_start()).contains(&p), "{p}");
            assert!(reserve(p).is_none(), "{p} is held by this process");
        }
        let p = free_port_pair(10_000);
        assert!(p + 10_000 < ephemeral_start());
        assert!(reserve(p + 10_000).is_none());
    }
}
