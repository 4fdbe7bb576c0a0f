//! Certificates made in the test: a CA, and leaf certificates it signs for `localhost` and
//! 127.0.0.1 (servers and clients alike), as PEM.

// A failure to make a certificate ends the test, by design.
#![allow(clippy::expect_used)]

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct Pem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

/// A private CA.
pub struct TestCa {
    pub cert: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            cert: cert.pem().into_bytes(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `localhost` and 127.0.0.1 signed by this CA.
    pub fn leaf(&self, name: &str) -> Pem {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("leaf params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        Pem {
            cert: cert.pem().into_bytes(),
            key: key.serialize_pem().into_bytes(),
        }
    }
}
