//! What a write of a timer with a chain (`then`) checks: every name it gives is a timer of
//! the same app, and following the chains from it never comes back to it.

use std::collections::BTreeSet;

use chime_domain::{TimerId, TimerName, TimerSpec, limits};

use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::service::TimerService;

impl TimerService {
    /// `spec` about to be written (as timer `id` when it exists already): 400 naming
    /// `then` for a name no live timer of the app has, 400 `CHAIN_CYCLE` when the chain
    /// reaches the timer itself. The check reads the chain as stored now; two writes racing
    /// to close a cycle can both pass (the steps then keep starting each other, one run at a
    /// time, until one is changed).
    pub(crate) async fn check_chain(&self, spec: &TimerSpec, id: Option<TimerId>) -> ApiResult<()> {
        if spec.then.is_empty() {
            return Ok(());
        }
        let cycle = || {
            let mut e = ApiError::new(
                ErrorCode::InvalidArgument,
                "CHAIN_CYCLE",
                format!(
                    "following the chain from {:?} comes back to it",
                    spec.name.as_str()
                ),
            );
            e.field = Some("then".into());
            e
        };
        let mut next: Vec<TimerName> = Vec::new();
        for name in spec.then.all() {
            if *name == spec.name {
                return Err(cycle());
            }
            let Some(step) = self.timer_named(&spec.app, name).await? else {
                return Err(ApiError::invalid(
                    "then",
                    format!(
                        "app {} has no timer named {:?}",
                        spec.app.as_str(),
                        name.as_str()
                    ),
                ));
            };
            next.extend(step.spec.then.all().into_iter().cloned());
        }
        // The rest of the chain, as stored: a name gone since is a step that will be
        // skipped, not an error here.
        let mut seen: BTreeSet<TimerName> = spec.then.all().into_iter().cloned().collect();
        while let Some(name) = next.pop() {
            if name == spec.name {
                return Err(cycle());
            }
            if !seen.insert(name.clone()) {
                continue;
            }
            if seen.len() > limits::MAX_CHAIN_REACH {
                return Err(ApiError::invalid(
                    "then",
                    format!(
                        "the chain reaches more than {} timers",
                        limits::MAX_CHAIN_REACH
                    ),
                ));
            }
            match self.timer_named(&spec.app, &name).await? {
                // This timer under its old name (a rename): what it names now is `spec`'s.
                Some(t) if Some(t.id) == id => {}
                Some(t) => next.extend(t.spec.then.all().into_iter().cloned()),
                None => {}
            }
        }
        Ok(())
    }
}
