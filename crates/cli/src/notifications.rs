//! `chime notifications …`: where an app's failed, dead and recovered runs are told, and
//! what was sent lately. Admin scope.

use chime_proto::v1 as pb;
use clap::Subcommand;
use serde_json::json;

use crate::client::CliError;
use crate::output::{self, Output};

#[derive(Debug, Subcommand)]
pub enum NotificationsCommand {
    /// Set where the app's failure notifications are POSTed (signed like callbacks).
    ///
    /// Example: chime notifications set --app billing --url https://ops.example/chime
    ///            --on dead --on failing --on recovered --failing-after 3
    #[command(verbatim_doc_comment)]
    Set {
        #[arg(long)]
        app: String,
        #[arg(long)]
        url: String,
        /// dead, failing or recovered; repeatable. None: all three.
        #[arg(long = "on", value_name = "EVENT")]
        on: Vec<String>,
        /// Send nothing (keeps the URL).
        #[arg(long, conflicts_with = "on")]
        off: bool,
        /// Runs of a timer in a row that must fail before timer.failing (default 3).
        #[arg(long)]
        failing_after: Option<u32>,
    },
    /// Show the app's settings and the notifications sent last.
    Get {
        #[arg(long)]
        app: String,
    },
}

pub async fn run(
    client: &mut chime_proto::AuthedTimerClient,
    command: NotificationsCommand,
    out: Output,
) -> Result<String, CliError> {
    Ok(match command {
        NotificationsCommand::Set {
            app,
            url,
            on,
            off,
            failing_after,
        } => {
            let on = (off || !on.is_empty()).then_some(pb::NotifyEvents { names: on });
            let put = client
                .put_notifications(pb::PutNotificationsRequest {
                    app,
                    url,
                    on,
                    failing_after,
                })
                .await?
                .into_inner();
            let s = put.settings.unwrap_or_default();
            output::done(
                &format!(
                    "{} notifications of {} to {} on {} (failing after {})",
                    if put.created { "set" } else { "replaced" },
                    s.app,
                    s.url,
                    if s.on.is_empty() {
                        "nothing".to_owned()
                    } else {
                        s.on.join(", ")
                    },
                    s.failing_after
                ),
                json!({"settings": settings_json(&s), "created": put.created}),
                out,
            )
        }
        NotificationsCommand::Get { app } => {
            let s = client
                .get_notifications(pb::GetNotificationsRequest { app })
                .await?
                .into_inner();
            match out {
                Output::Json => output::pretty(&settings_json(&s)),
                Output::Table => table(&s),
            }
        }
    })
}

fn settings_json(s: &pb::NotificationSettings) -> serde_json::Value {
    let recent: Vec<_> = s
        .recent
        .iter()
        .map(|n| {
            json!({
                "type": n.r#type,
                "timer_id": n.timer_id,
                "timer_name": n.timer_name,
                "run_at": n.run_at.map(output::rfc3339),
                "attempt": n.attempt,
                "error": n.error,
                "delivered": n.delivered,
                "attempts": n.attempts,
                "sent_at": n.sent_at.map(output::rfc3339),
                "failure": n.failure,
            })
        })
        .collect();
    json!({
        "app": s.app,
        "url": s.url,
        "on": s.on,
        "failing_after": s.failing_after,
        "updated_at": s.updated_at.map(output::rfc3339),
        "recent": recent,
    })
}

fn table(s: &pb::NotificationSettings) -> String {
    let mut lines = vec![
        format!("url            {}", s.url),
        format!("on             {}", s.on.join(", ")),
        format!("failing after  {}", s.failing_after),
    ];
    if !s.recent.is_empty() {
        lines.push(String::new());
        lines.push("SENT AT                   TYPE             TIMER       RESULT".into());
        for n in &s.recent {
            let result = if n.delivered {
                format!("delivered ({} tries)", n.attempts)
            } else {
                format!("failed ({} tries): {}", n.attempts, n.failure)
            };
            lines.push(format!(
                "{:<25} {:<16} {:<11} {result}",
                n.sent_at.map(output::rfc3339).unwrap_or_default(),
                n.r#type,
                n.timer_name,
            ));
        }
    }
    lines.join("\n")
}
