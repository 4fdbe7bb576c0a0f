//! What a verified token means to a request: its caller, the apps it may touch, its scopes.
//! The checking itself is [`chime_runtime::auth`], shared with the executors' worker streams.

use chime_domain::Scopes;
use chime_runtime::auth::{Refused, Verified};

pub use chime_runtime::auth::{Authenticator, Minted, mint};

use crate::context::{AppScope, Caller};
use crate::error::{ApiError, ErrorCode};

/// The request context's view of a verified token.
pub(crate) fn principal(verified: Verified) -> (Caller, AppScope, Scopes) {
    match verified {
        Verified::Admin => (Caller::Admin, AppScope::All, Scopes::ALL),
        Verified::App { id, app, scopes } => (
            Caller::Token {
                id,
                app: app.clone(),
            },
            AppScope::Only(app),
            scopes,
        ),
    }
}

/// The answer to a refused token: callers only ever learn "missing" or "invalid".
pub(crate) fn refusal(refused: Refused) -> ApiError {
    let (reason, message) = match refused {
        Refused::Missing => (
            "TOKEN_MISSING",
            "this API needs an Authorization: Bearer <token> header",
        ),
        _ => ("TOKEN_INVALID", "the bearer token is not valid"),
    };
    ApiError::new(ErrorCode::Unauthenticated, reason, message)
}
