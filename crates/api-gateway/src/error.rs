//! The one place where failures become API errors: each [`ErrorCode`] has one HTTP status
//! and one gRPC code, so REST and gRPC callers see the same error for the same mistake.

use std::fmt;

use chime_domain::ValidationError;
use chime_storage::StoreError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    /// No credentials, or credentials that are not valid.
    Unauthenticated,
    NotFound,
    /// The caller may not act on the app it named.
    PermissionDenied,
    AlreadyExists,
    FailedPrecondition,
    PayloadTooLarge,
    UnsupportedMediaType,
    /// A quota or rate limit: wait, or delete something.
    ResourceExhausted,
    MethodNotAllowed,
    Unavailable,
    Internal,
}

impl ErrorCode {
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidArgument => 400,
            Self::Unauthenticated => 401,
            Self::PermissionDenied => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::AlreadyExists | Self::FailedPrecondition => 409,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::ResourceExhausted => 429,
            Self::Unavailable => 503,
            Self::Internal => 500,
        }
    }

    pub fn grpc_code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            Self::InvalidArgument | Self::UnsupportedMediaType => Code::InvalidArgument,
            Self::Unauthenticated => Code::Unauthenticated,
            Self::NotFound => Code::NotFound,
            Self::PermissionDenied => Code::PermissionDenied,
            Self::AlreadyExists => Code::AlreadyExists,
            Self::FailedPrecondition => Code::FailedPrecondition,
            Self::PayloadTooLarge | Self::ResourceExhausted => Code::ResourceExhausted,
            Self::MethodNotAllowed => Code::Unimplemented,
            Self::Unavailable => Code::Unavailable,
            Self::Internal => Code::Internal,
        }
    }

    /// Stable, machine-readable name (problem `code`, gRPC `ErrorInfo.reason` prefix).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::NotFound => "NOT_FOUND",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::FailedPrecondition => "FAILED_PRECONDITION",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::Unavailable => "UNAVAILABLE",
            Self::Internal => "INTERNAL",
        }
    }
}

/// An error as both transports report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    /// Finer reason, e.g. `NAME_TAKEN`, `VERSION_MISMATCH`, `IDEMPOTENCY_KEY_REUSED`.
    pub reason: &'static str,
    pub message: String,
    /// The offending input field, as a dotted path.
    pub field: Option<String>,
    /// When trying again may succeed (REST `Retry-After`, gRPC `RetryInfo`).
    pub retry_after: Option<std::time::Duration>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: ErrorCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::InvalidArgument,
            reason: "INVALID_FIELD",
            message: message.into(),
            field: Some(field.into()),
            retry_after: None,
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        Self::invalid(e.field, e.message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::TimerNotFound(_) => {
                Self::new(ErrorCode::NotFound, "NOT_FOUND", e.to_string())
            }
            StoreError::NameTaken { .. } => {
                let mut err = Self::new(ErrorCode::AlreadyExists, "NAME_TAKEN", e.to_string());
                err.field = Some("name".into());
                err
            }
            StoreError::IdempotencyKeyReused { .. } => Self::new(
                ErrorCode::AlreadyExists,
                "IDEMPOTENCY_KEY_REUSED",
                e.to_string(),
            ),
            StoreError::VersionConflict { .. } => {
                let mut err = Self::new(
                    ErrorCode::FailedPrecondition,
                    "VERSION_MISMATCH",
                    e.to_string(),
                );
                err.field = Some("expected_version".into());
                err
            }
            StoreError::Invalid(v) => v.into(),
            StoreError::Unavailable(m) => {
                tracing::warn!(error = %m, "storage unavailable");
                Self::new(
                    ErrorCode::Unavailable,
                    "STORAGE_UNAVAILABLE",
                    "the database is unavailable; retry shortly",
                )
            }
            StoreError::Internal(m) => {
                // The detail may hold SQL or row contents: log it, do not return it.
                tracing::error!(error = %m, "storage failure");
                Self::new(ErrorCode::Internal, "INTERNAL", "internal error")
            }
        }
    }
}
