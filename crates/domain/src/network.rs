//! Where callbacks may go: the SSRF policy. By default a callback may not reach loopback,
//! private, link-local (the cloud metadata address among them), CGNAT, unique-local,
//! unspecified, multicast or broadcast addresses, whatever the spelling: IPv4 embedded in
//! IPv6 (mapped, compatible, 6to4, NAT64) is judged as the IPv4 it carries, and the URL
//! parser already turns decimal, octal, hex and shortened IPv4 hosts into their address.
//! Operators open ranges (`CHIME_CALLBACK_ALLOW_NETWORKS`) or close more
//! (`CHIME_CALLBACK_DENY_NETWORKS`); a deny wins over an allow.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network in CIDR notation (`10.0.0.0/8`, `fd00::/8`); a bare address is a /32 or /128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// A network that is not valid CIDR notation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid network {input:?}: {reason}")]
pub struct CidrError {
    pub input: String,
    pub reason: &'static str,
}

impl Cidr {
    const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Self {
        Self {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    const fn v6(segments: [u16; 8], prefix: u8) -> Self {
        let [a, b, c, d, e, f, g, h] = segments;
        Self {
            network: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
            prefix,
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| CidrError {
            input: s.to_owned(),
            reason,
        };
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = addr.parse().map_err(|_| err("not an IP address"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().map_err(|_| err("bad prefix length"))?,
            None => max,
        };
        if prefix > max {
            return Err(err("prefix longer than the address"));
        }
        Ok(Self { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// The ranges callbacks may not reach unless allowed, and why.
const BLOCKED: &[(Cidr, &str)] = &[
    (Cidr::v4(0, 0, 0, 0, 8), "unspecified (0.0.0.0/8)"),
    (Cidr::v4(10, 0, 0, 0, 8), "private (10.0.0.0/8)"),
    (Cidr::v4(100, 64, 0, 0, 10), "CGNAT (100.64.0.0/10)"),
    (Cidr::v4(127, 0, 0, 0, 8), "loopback (127.0.0.0/8)"),
    (
        Cidr::v4(169, 254, 0, 0, 16),
        "link-local (169.254.0.0/16, cloud metadata)",
    ),
    (Cidr::v4(172, 16, 0, 0, 12), "private (172.16.0.0/12)"),
    (Cidr::v4(192, 168, 0, 0, 16), "private (192.168.0.0/16)"),
    (Cidr::v4(224, 0, 0, 0, 4), "multicast (224.0.0.0/4)"),
    (
        Cidr::v4(240, 0, 0, 0, 4),
        "reserved and broadcast (240.0.0.0/4)",
    ),
    (
        Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 128),
        "unspecified (::/128)",
    ),
    (
        Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
        "loopback (::1/128)",
    ),
    (
        Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        "unique-local (fc00::/7)",
    ),
    (
        Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        "link-local (fe80::/10)",
    ),
    (
        Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
        "multicast (ff00::/8)",
    ),
];

/// Why a callback address is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ip} is {rule}; callbacks may not reach it (CHIME_CALLBACK_ALLOW_NETWORKS opens a range)")]
pub struct Blocked {
    pub ip: IpAddr,
    pub rule: String,
}

/// Which addresses callbacks may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    allow: Vec<Cidr>,
    deny: Vec<Cidr>,
}

impl NetworkPolicy {
    pub fn new(allow: Vec<Cidr>, deny: Vec<Cidr>) -> Self {
        Self { allow, deny }
    }

    /// Every address allowed: for tests and tools that call back on loopback.
    pub fn open() -> Self {
        Self::new(
            vec![Cidr::v4(0, 0, 0, 0, 0), Cidr::v6([0; 8], 0)],
            Vec::new(),
        )
    }

    /// `chime dev`: the default, with loopback opened so its echo endpoint works.
    pub fn with_loopback(mut self) -> Self {
        self.allow.push(Cidr::v4(127, 0, 0, 0, 8));
        self.allow.push(Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128));
        self
    }

    /// The verdict on a URL whose host is an IP address; host names are judged after DNS,
    /// at delivery.
    pub fn check_url(&self, url: &url::Url) -> Result<(), Blocked> {
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check(IpAddr::V6(ip)),
            _ => Ok(()),
        }
    }

    /// Whether a callback may connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), Blocked> {
        // IPv4 carried in IPv6 is judged as that IPv4, and the IPv6 itself as well.
        let mut judged = vec![ip];
        if let IpAddr::V6(v6) = ip
            && let Some(v4) = embedded_v4(v6)
        {
            judged.push(IpAddr::V4(v4));
        }
        for ip in judged {
            if let Some(rule) = self.deny.iter().find(|c| c.contains(ip)) {
                return Err(Blocked {
                    ip,
                    rule: format!("in CHIME_CALLBACK_DENY_NETWORKS ({rule})"),
                });
            }
            if self.allow.iter().any(|c| c.contains(ip)) {
                continue;
            }
            if let Some((_, rule)) = BLOCKED.iter().find(|(c, _)| c.contains(ip)) {
                return Err(Blocked {
                    ip,
                    rule: (*rule).to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// The IPv4 address an IPv6 one carries: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`), 6to4 (`2002:aabb:ccdd::/48`) and NAT64 (`64:ff9b::a.b.c.d`).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        // `::` and `::1` are IPv6's own unspecified and loopback, judged as such.
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) != (0, 0) && (hi, lo) != (0, 1) => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_ip(url: &str) -> IpAddr {
        match url::Url::parse(url).unwrap().host().unwrap() {
            url::Host::Ipv4(ip) => IpAddr::V4(ip),
            url::Host::Ipv6(ip) => IpAddr::V6(ip),
            url::Host::Domain(d) => panic!("{url}: {d} is not an address"),
        }
    }

    #[test]
    fn every_blocked_range_in_every_spelling_is_refused() {
        let policy = NetworkPolicy::default();
        for url in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::127.0.0.1]/",
            "http://[2002:7f00:1::]/",
            "http://[64:ff9b::7f00:1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:169.254.169.254]/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://[::]/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[ff02::1]/",
        ] {
            assert!(policy.check(host_ip(url)).is_err(), "{url} must be refused");
        }
    }

    #[test]
    fn public_addresses_pass_and_the_lists_adjust_the_default() {
        let policy = NetworkPolicy::default();
        for url in [
            "http://93.184.216.34/",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
            "http://[2606:4700::1111]/",
        ] {
            assert_eq!(policy.check(host_ip(url)), Ok(()), "{url}");
        }
        let cluster: Cidr = "10.0.0.0/8".parse().unwrap();
        let metadata: Cidr = "169.254.169.254".parse().unwrap();
        let opened = NetworkPolicy::new(vec![cluster], vec!["10.9.0.0/16".parse().unwrap()]);
        assert_eq!(opened.check(host_ip("http://10.1.2.3/")), Ok(()));
        let refused = opened.check(host_ip("http://10.9.0.1/")).unwrap_err();
        assert!(
            refused.rule.contains("CHIME_CALLBACK_DENY_NETWORKS"),
            "{refused}"
        );
        let closed = NetworkPolicy::new(Vec::new(), vec![metadata]);
        assert!(closed.check(host_ip("http://169.254.169.254/")).is_err());
        assert!(
            NetworkPolicy::default()
                .with_loopback()
                .check(host_ip("http://127.0.0.1:8080/"))
                .is_ok()
        );
        assert!(
            NetworkPolicy::open()
                .check(host_ip("http://[::1]/"))
                .is_ok()
        );
    }

    #[test]
    fn the_refusal_names_the_rule() {
        let err = NetworkPolicy::default()
            .check(host_ip("http://169.254.169.254/"))
            .unwrap_err();
        assert!(err.to_string().contains("link-local"), "{err}");
    }

    #[test]
    fn cidrs_parse_and_refuse_nonsense() {
        assert_eq!(
            "10.0.0.0/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!("::1".parse::<Cidr>().unwrap().to_string(), "::1/128");
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "example.com/8",
            "10.0.0.0/x",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
