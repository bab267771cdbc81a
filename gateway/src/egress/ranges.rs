//! The address ranges a callback may never reach unless configured: every block of the IANA
//! IPv4 and IPv6 special-purpose registries that is not globally reachable. IPv4-mapped and
//! NAT64 addresses are judged as the IPv4 address they carry, so no IPv6 spelling gets around
//! an IPv4 refusal.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use ipnet::IpNet;

/// A refused block: its CIDR and what it is (for the unit tests and operators reading code).
pub(super) const REFUSED: &[(&str, &str)] = &[
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private use"),
    ("100.64.0.0/10", "shared address space (CGN)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link local"),
    ("172.16.0.0/12", "private use"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
    ("192.168.0.0/16", "private use"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved, and limited broadcast"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard only"),
    ("2001::/23", "IETF protocol assignments (Teredo included)"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing SIDs"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link local"),
    ("fec0::/10", "site local (deprecated)"),
    ("ff00::/8", "multicast"),
];

static NETS: LazyLock<Vec<IpNet>> =
    LazyLock::new(|| REFUSED.iter().map(|(cidr, _)| cidr.parse().expect("a valid CIDR in the table")).collect());

/// The IPv4 address an IPv6 one stands for: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-translated
/// (`::ffff:0:a.b.c.d`), IPv4-compatible (`::a.b.c.d`) and the NAT64 well-known prefix
/// (`64:ff9b::/96`).
fn carried_v4(v6: &Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let tail = Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32);
    match s[..6] {
        // NAT64's well-known prefix, and the IPv4-translated form (`::ffff:0:a.b.c.d`).
        [0x64, 0xff9b, 0, 0, 0, 0] | [0, 0, 0, 0, 0xffff, 0] => Some(tail),
        // The deprecated IPv4-compatible form (`::a.b.c.d`); `::` and `::1` are IPv6's own.
        [0, 0, 0, 0, 0, 0] if (s[6], s[7]) != (0, 0) && (s[6], s[7]) != (0, 1) => Some(tail),
        _ => None,
    }
}

/// The address judged: an IPv6 one carrying an IPv4 address is that IPv4 address.
pub(super) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => carried_v4(&v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether a callback may connect to `ip`, given the ranges the operator allowed.
pub(super) fn allowed(ip: IpAddr, allow_private: &[IpNet]) -> bool {
    let ip = canonical(ip);
    if allow_private.iter().any(|net| net.contains(&ip)) {
        return true;
    }
    !NETS.iter().any(|net| net.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One example address per entry, inside it: refused by default, and allowed once its block
    /// is configured (a test per entry, so a removed or mistyped block fails by name).
    const EXAMPLES: &[(&str, &str)] = &[
        ("0.0.0.0/8", "0.1.2.3"),
        ("10.0.0.0/8", "10.255.0.1"),
        ("100.64.0.0/10", "100.127.255.254"),
        ("127.0.0.0/8", "127.0.0.1"),
        ("169.254.0.0/16", "169.254.169.254"),
        ("172.16.0.0/12", "172.31.0.1"),
        ("192.0.0.0/24", "192.0.0.8"),
        ("192.0.2.0/24", "192.0.2.1"),
        ("192.88.99.0/24", "192.88.99.1"),
        ("192.168.0.0/16", "192.168.1.1"),
        ("198.18.0.0/15", "198.19.0.1"),
        ("198.51.100.0/24", "198.51.100.7"),
        ("203.0.113.0/24", "203.0.113.9"),
        ("224.0.0.0/4", "239.255.255.250"),
        ("240.0.0.0/4", "255.255.255.255"),
        ("::/128", "::"),
        ("::1/128", "::1"),
        ("64:ff9b:1::/48", "64:ff9b:1::1"),
        ("100::/64", "100::1"),
        ("2001::/23", "2001::1"),
        ("2001:db8::/32", "2001:db8::1"),
        ("2002::/16", "2002:c000:204::1"),
        ("3fff::/20", "3fff::1"),
        ("5f00::/16", "5f00::1"),
        ("fc00::/7", "fd00::1"),
        ("fe80::/10", "fe80::1"),
        ("fec0::/10", "fec0::1"),
        ("ff00::/8", "ff02::1"),
    ];

    #[test]
    fn every_entry_of_the_table_is_refused_unless_configured() {
        assert_eq!(EXAMPLES.len(), REFUSED.len(), "an example per entry");
        for ((cidr, example), (entry, what)) in EXAMPLES.iter().zip(REFUSED) {
            assert_eq!(cidr, entry, "examples in the table's order");
            let ip: IpAddr = example.parse().unwrap();
            assert!(!allowed(ip, &[]), "{example} ({what}) must be refused");
            let net: IpNet = cidr.parse().unwrap();
            assert!(allowed(ip, &[net]), "{example} allowed once {cidr} is configured");
        }
    }

    #[test]
    fn ipv4_carried_in_ipv6_is_judged_as_ipv4() {
        for carried in [
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
            "::ffff:0:7f00:1",
            "::ffff:0:a00:1",
        ] {
            assert!(!allowed(carried.parse().unwrap(), &[]), "{carried}");
        }
        let loopback: IpNet = "127.0.0.0/8".parse().unwrap();
        assert!(allowed("::ffff:127.0.0.1".parse().unwrap(), &[loopback]));
        assert!(allowed("::ffff:8.8.8.8".parse().unwrap(), &[]));
    }

    #[test]
    fn global_addresses_pass() {
        for global in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "64:ff9b::808:808", "192.0.0.9"] {
            // 192.0.0.9 is inside 192.0.0.0/24, which is refused as a whole: a stricter choice.
            let expected = global != "192.0.0.9";
            assert_eq!(allowed(global.parse().unwrap(), &[]), expected, "{global}");
        }
    }
}
