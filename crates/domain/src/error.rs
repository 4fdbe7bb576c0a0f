use std::fmt;

/// A rejected input value, naming the offending field as a dotted path (`callback.url`), so
/// REST and gRPC errors can point the caller at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    pub field: String,
    pub message: String,
}

impl ValidationError {
    /// `message`: any displayable reason, such as a parse error of this crate.
    pub fn new(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self {
            field: field.into(),
            message: message.to_string(),
        }
    }

    /// Re-roots the error under a parent field: `url` inside `callback` becomes `callback.url`.
    pub fn within(mut self, parent: &str) -> Self {
        self.field = if self.field.is_empty() {
            parent.to_owned()
        } else {
            format!("{parent}.{}", self.field)
        };
        self
    }
}

/// Free text a caller names things with (a name, a reason, a key, a prefix): at most `max_chars`
/// characters and no control characters, which no name holds and PostgreSQL refuses (NUL).
pub fn plain_text(field: &str, text: &str, max_chars: usize) -> Result<(), ValidationError> {
    if text.chars().count() > max_chars {
        return Err(ValidationError::new(
            field,
            format!("must be at most {max_chars} characters"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(ValidationError::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ValidationError {}
