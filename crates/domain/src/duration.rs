//! Human durations such as `90s`, `1m30s`, `250ms`, `2h`. Our own small grammar rather than a
//! crate's, so the accepted forms are exactly the documented ones (no months, no years).

use std::time::Duration;

/// Why a duration did not parse. Each message names the input and says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration; use a form such as 500ms, 30s, 5m, 1h30m")]
    Empty,
    #[error("invalid duration {input:?}: expected a number at {at:?}")]
    ExpectedNumber { input: String, at: String },
    #[error("invalid duration {input:?}: missing unit (ms, s, m, h or d)")]
    MissingUnit { input: String },
    #[error("invalid duration {input:?}: unknown unit {unit:?} (use ms, s, m, h or d)")]
    UnknownUnit { input: String, unit: String },
    #[error("invalid duration {input:?}: units must go from largest to smallest")]
    UnitOrder { input: String },
    #[error("invalid duration {input:?}: too large")]
    TooLarge { input: String },
}

/// Parses `<number><unit>` groups, units `ms`, `s`, `m`, `h`, `d`, largest first, e.g. `1h30m`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let owned = || input.to_owned();
    let mut total_ms: u64 = 0;
    let mut rest = s;
    let mut last_unit_ms = u64::MAX;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::ExpectedNumber {
                input: owned(),
                at: rest.to_owned(),
            });
        }
        let value: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::TooLarge { input: owned() })?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(DurationError::MissingUnit { input: owned() }),
            other => {
                return Err(DurationError::UnknownUnit {
                    input: owned(),
                    unit: other.to_owned(),
                });
            }
        };
        if unit_ms >= last_unit_ms {
            return Err(DurationError::UnitOrder { input: owned() });
        }
        last_unit_ms = unit_ms;
        rest = &rest[unit_len..];
        total_ms = value
            .checked_mul(unit_ms)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(|| DurationError::TooLarge { input: owned() })?;
    }
    Ok(Duration::from_millis(total_ms))
}

/// The canonical form of a duration, the inverse of [`parse_duration`] (`90s` prints `1m30s`).
pub fn format_duration(d: Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    if ms > 0 {
        out.push_str(&format!("{ms}ms"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_documented_forms() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1d2h"), Ok(Duration::from_secs(93_600)));
        assert_eq!(parse_duration(" 5s "), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn rejects_malformed_forms() {
        for bad in [
            "",
            "5",
            "s",
            "5x",
            "1s1m",
            "5 s",
            "-5s",
            "1.5s",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn formats_canonically_and_round_trips() {
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        for ms in [1, 999, 1000, 61_001, 86_400_000, 90_061_001] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
