//! Credentials: tokens are found by id until revoked, per app; each app has one current
//! signing secret, created once, and a rotation keeps the old one for its grace period.

use chime_domain::{ApiToken, Scopes, SigningSecret, TokenId};

use super::*;
use crate::Credentials;

fn token(app: &str, n: u8, at: i64) -> ApiToken {
    ApiToken {
        id: TokenId::from_bytes([n; 8]),
        app: AppName::parse(app).unwrap(),
        name: Some(format!("token {n}")),
        scopes: if n.is_multiple_of(2) {
            Scopes::DEFAULT
        } else {
            Scopes::parse(&["read"]).unwrap()
        },
        hash: format!("{n:064x}"),
        created_at: Timestamp::from_millis(at),
        expires_at: (n == 3).then(|| Timestamp::from_millis(at + 60_000)),
    }
}

pub async fn tokens_are_found_by_id_until_revoked<S: Credentials + ?Sized>(store: Arc<S>) {
    let billing = AppName::parse("billing").unwrap();
    let (a, b, c) = (
        token("billing", 2, T0),
        token("billing", 3, T0 + 1),
        token("mail", 4, T0),
    );
    for t in [&a, &b, &c] {
        store.create_token(t).await.unwrap();
    }
    assert_eq!(
        store.list_tokens(&billing).await.unwrap(),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(store.find_token(&b.id).await.unwrap(), Some(b.clone()));
    assert_eq!(
        store
            .find_token(&TokenId::from_bytes([9; 8]))
            .await
            .unwrap(),
        None
    );
    // Another app's token is not this app's to revoke.
    let now = Timestamp::from_millis(T0 + 5);
    assert!(!store.revoke_token(&billing, &c.id, now).await.unwrap());
    assert!(store.revoke_token(&billing, &a.id, now).await.unwrap());
    assert!(!store.revoke_token(&billing, &a.id, now).await.unwrap());
    assert_eq!(store.find_token(&a.id).await.unwrap(), None);
    assert_eq!(store.list_tokens(&billing).await.unwrap(), vec![b]);
    assert_eq!(store.find_token(&c.id).await.unwrap(), Some(c));
}

pub async fn each_app_gets_one_signing_secret<S: Credentials + ?Sized>(store: Arc<S>) {
    let app = AppName::parse("billing").unwrap();
    let now = Timestamp::from_millis(T0);
    // Racing first uses agree on one secret.
    let tries = (0..8u8).map(|n| {
        let store = store.clone();
        let app = app.clone();
        async move {
            store
                .signing_secrets(&app, &SigningSecret::from_key([n; 32]), now)
                .await
                .unwrap()
        }
    });
    let seen: HashSet<String> = futures::future::join_all(tries)
        .await
        .into_iter()
        .map(|s| {
            assert_eq!(s.len(), 1);
            s[0].as_str().to_owned()
        })
        .collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let again = store
        .signing_secrets(&app, &SigningSecret::from_key([99; 32]), now)
        .await
        .unwrap();
    assert_eq!(again[0].as_str(), seen.iter().next().unwrap());
    let mail = store
        .signing_secrets(
            &AppName::parse("mail").unwrap(),
            &SigningSecret::from_key([50; 32]),
            now,
        )
        .await
        .unwrap();
    assert_eq!(mail, vec![SigningSecret::from_key([50; 32])]);
}

pub async fn rotation_keeps_the_old_secret_for_its_grace<S: Credentials + ?Sized>(store: Arc<S>) {
    let app = AppName::parse("billing").unwrap();
    let at = Timestamp::from_millis;
    let first = SigningSecret::from_key([1; 32]);
    let second = SigningSecret::from_key([2; 32]);
    let third = SigningSecret::from_key([3; 32]);
    store.signing_secrets(&app, &first, at(T0)).await.unwrap();
    let rotated = store
        .rotate_signing_secret(&app, &second, at(T0 + 10), at(T0 + 1_000))
        .await
        .unwrap();
    assert_eq!(rotated, vec![second.clone(), first.clone()]);
    let unused = SigningSecret::from_key([9; 32]);
    assert_eq!(
        store
            .signing_secrets(&app, &unused, at(T0 + 999))
            .await
            .unwrap(),
        vec![second.clone(), first]
    );
    assert_eq!(
        store
            .signing_secrets(&app, &unused, at(T0 + 1_000))
            .await
            .unwrap(),
        vec![second.clone()]
    );
    // Rotating again retires the second at its own grace; the first stays retired.
    let again = store
        .rotate_signing_secret(&app, &third, at(T0 + 2_000), at(T0 + 3_000))
        .await
        .unwrap();
    assert_eq!(again, vec![third, second]);
}
