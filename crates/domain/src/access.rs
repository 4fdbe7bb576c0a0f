//! Who may do what, and how receivers know a callback is Chime's: API token scopes and
//! records, and the per-app signing secrets callbacks are signed with (Standard Webhooks).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::{AppName, Timestamp, ValidationError};

/// One permission a token carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Read timers, runs and dead letters.
    Read,
    /// Create, change, delete, trigger and redrive timers.
    Write,
    /// Manage the app's tokens and signing secret.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Write, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Read => 1,
            Self::Write => 2,
            Self::Admin => 4,
        }
    }
}

/// A set of [`Scope`]s, never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scopes(u8);

impl Scopes {
    /// What a token gets when none are asked for.
    pub const DEFAULT: Scopes = Scopes(1 | 2);
    pub const ALL: Scopes = Scopes(1 | 2 | 4);

    /// Scope names as a caller or a stored row lists them; unknown or no names are refused.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self, ValidationError> {
        let mut bits = 0;
        for name in names {
            let scope = Scope::ALL
                .into_iter()
                .find(|s| s.as_str() == name.as_ref().trim())
                .ok_or_else(|| {
                    ValidationError::new(
                        "scopes",
                        format!(
                            "unknown scope {:?}: use read, write or admin",
                            name.as_ref()
                        ),
                    )
                })?;
            bits |= scope.bit();
        }
        if bits == 0 {
            return Err(ValidationError::new("scopes", "name at least one scope"));
        }
        Ok(Self(bits))
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn names(self) -> Vec<&'static str> {
        Scope::ALL
            .into_iter()
            .filter(|s| self.contains(*s))
            .map(Scope::as_str)
            .collect()
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

/// A token's public id: 16 lowercase hex digits. It is part of the token, so a token is
/// looked up by id and then compared by hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenId(String);

impl TokenId {
    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        if s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Self(s.to_owned()))
        } else {
            Err(ValidationError::new("id", "not a token id"))
        }
    }

    /// The id for 8 random bytes.
    pub fn from_bytes(bytes: [u8; 8]) -> Self {
        Self(format!("{:016x}", u64::from_be_bytes(bytes)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest token name, in characters.
pub const MAX_TOKEN_NAME_CHARS: usize = 100;

/// An API token as stored: never the token itself, only its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: TokenId,
    pub app: AppName,
    pub name: Option<String>,
    pub scopes: Scopes,
    /// Hex SHA-256 of the whole token.
    pub hash: String,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
}

impl ApiToken {
    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }
}

/// Prefix of a Standard Webhooks secret.
const SECRET_PREFIX: &str = "whsec_";

/// An app's callback signing secret, `whsec_<base64 of the key>`.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret {
    text: String,
    key: Vec<u8>,
}

impl SigningSecret {
    /// A secret for 32 random bytes.
    pub fn from_key(key: [u8; 32]) -> Self {
        Self {
            text: format!("{SECRET_PREFIX}{}", B64.encode(key)),
            key: key.to_vec(),
        }
    }

    /// A stored secret; a key shorter than 16 bytes is refused.
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let bad = || ValidationError::new("secret", "not a whsec_ signing secret");
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or_else(bad)?;
        let key = B64.decode(encoded).map_err(|_| bad())?;
        if key.len() < 16 {
            return Err(bad());
        }
        Ok(Self {
            text: text.to_owned(),
            key,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key.
        f.write_str("SigningSecret(…)")
    }
}

/// The `webhook-signature` value: one signature per secret, space-separated (during a
/// rotation's grace period, the new secret's and the old one's).
pub fn webhook_signature(
    secrets: &[SigningSecret],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_and_print() {
        let s = Scopes::parse(&["read", "admin"]).unwrap();
        assert!(s.contains(Scope::Read) && s.contains(Scope::Admin) && !s.contains(Scope::Write));
        assert_eq!(s.to_string(), "read,admin");
        assert_eq!(Scopes::parse(&s.names()).unwrap(), s);
        assert!(Scopes::parse::<&str>(&[]).is_err());
        assert!(Scopes::parse(&["root"]).is_err());
        assert_eq!(Scopes::DEFAULT.names(), ["read", "write"]);
    }

    #[test]
    fn token_ids_are_sixteen_hex_digits() {
        let id = TokenId::from_bytes([0, 1, 2, 3, 4, 5, 6, 255]);
        assert_eq!(id.as_str(), "00010203040506ff");
        assert_eq!(TokenId::parse(id.as_str()).unwrap(), id);
        assert!(TokenId::parse("00010203040506FF").is_err());
        assert!(TokenId::parse("0001").is_err());
    }

    #[test]
    fn signatures_match_the_standard_webhooks_example() {
        // The example in the Standard Webhooks specification.
        let secret = SigningSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert!(SigningSecret::parse("whsec_").is_err());
        assert!(SigningSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        let fresh = SigningSecret::from_key([7; 32]);
        assert_eq!(SigningSecret::parse(fresh.as_str()).unwrap(), fresh);
        assert_eq!(format!("{fresh:?}"), "SigningSecret(…)");
        let both = webhook_signature(&[fresh.clone(), secret], "m", 1, b"x");
        assert_eq!(both.split(' ').count(), 2);
    }
}
