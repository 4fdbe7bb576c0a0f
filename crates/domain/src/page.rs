//! Opaque page tokens. A token carries the last key of the previous page plus a checksum bound
//! to the query it came from, so a tampered token, or one replayed against another query, is
//! rejected with a clear error instead of silently returning the wrong rows. The checksum
//! guards integrity, not secrecy: tokens grant nothing the caller could not list anyway.

use crate::ValidationError;
use crate::limits;

/// A page of results and the token for the next one (`None` on the last page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_page_token: Option<PageToken>,
}

/// How many items a page holds: 1 to 1000, default 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize(u32);

impl PageSize {
    pub fn new(n: Option<u32>) -> Result<Self, ValidationError> {
        match n {
            None | Some(0) => Ok(Self(limits::DEFAULT_PAGE_SIZE)),
            Some(n) if n <= limits::MAX_PAGE_SIZE => Ok(Self(n)),
            Some(_) => Err(ValidationError::new(
                "page_size",
                format!("must be at most {}", limits::MAX_PAGE_SIZE),
            )),
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for PageSize {
    fn default() -> Self {
        Self(limits::DEFAULT_PAGE_SIZE)
    }
}

/// A cursor: the sort key of the last item returned, as two integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageToken {
    pub after: (i64, i64),
    text: String,
}

impl PageToken {
    const VERSION: &'static str = "c1";

    /// A token for rows after `after`, bound to the query described by `scope`.
    pub fn new(after: (i64, i64), scope: &str) -> Self {
        let body = format!("{:016x}{:016x}", after.0 as u64, after.1 as u64);
        let sum = checksum(&body, scope);
        Self {
            after,
            text: format!("{}{body}{sum:016x}", Self::VERSION),
        }
    }

    /// Reads a token given back by a caller for the query described by `scope`.
    pub fn parse(text: &str, scope: &str) -> Result<Self, ValidationError> {
        let bad = || {
            ValidationError::new(
                "page_token",
                "invalid page token; pass back the next_page_token of the same query unchanged",
            )
        };
        let rest = text.strip_prefix(Self::VERSION).ok_or_else(bad)?;
        if rest.len() != 48 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let (body, sum) = rest.split_at(32);
        let sum = u64::from_str_radix(sum, 16).map_err(|_| bad())?;
        if sum != checksum(body, scope) {
            return Err(bad());
        }
        let a = u64::from_str_radix(&body[..16], 16).map_err(|_| bad())? as i64;
        let b = u64::from_str_radix(&body[16..], 16).map_err(|_| bad())? as i64;
        Ok(Self {
            after: (a, b),
            text: text.to_owned(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// FNV-1a over the body and scope: cheap, stable, good enough to catch edits.
fn checksum(body: &str, scope: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in body.bytes().chain([0u8]).chain(scope.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_within_their_scope() {
        let t = PageToken::new((42, -7), "timers:app=billing");
        let back = PageToken::parse(t.as_str(), "timers:app=billing").unwrap();
        assert_eq!(back.after, (42, -7));
    }

    #[test]
    fn tampered_or_foreign_tokens_are_rejected() {
        let t = PageToken::new((42, 0), "timers:app=billing");
        let mut chars: Vec<char> = t.as_str().chars().collect();
        chars[5] = if chars[5] == '0' { '1' } else { '0' };
        let tampered: String = chars.into_iter().collect();
        assert!(PageToken::parse(&tampered, "timers:app=billing").is_err());
        assert!(PageToken::parse(t.as_str(), "timers:app=other").is_err());
        for junk in ["", "abc", "c1zz", &"c1".repeat(30)] {
            let err = PageToken::parse(junk, "s").unwrap_err();
            assert_eq!(err.field, "page_token");
        }
    }

    #[test]
    fn page_size_defaults_and_limits() {
        assert_eq!(PageSize::new(None).unwrap().get(), 100);
        assert_eq!(PageSize::new(Some(0)).unwrap().get(), 100);
        assert_eq!(PageSize::new(Some(1000)).unwrap().get(), 1000);
        assert_eq!(PageSize::new(Some(1001)).unwrap_err().field, "page_size");
    }
}
