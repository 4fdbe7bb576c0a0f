//! `chime calendars …`: an app's exclusion calendars, the dates its timers may skip.

use chime_proto::v1 as pb;
use clap::Subcommand;
use serde_json::json;

use crate::client::CliError;
use crate::output::{self, Output};

#[derive(Debug, Subcommand)]
pub enum CalendarsCommand {
    /// Create or replace a calendar. The app's timers that name it (--exclude-calendar) are
    /// rewritten to skip its new dates.
    ///
    /// Example: chime calendars put --app billing --name holidays
    ///            --date 2026-12-25 --date 2026-12-31/2027-01-01
    #[command(verbatim_doc_comment)]
    Put {
        #[arg(long)]
        app: String,
        #[arg(long)]
        name: String,
        /// A date (2026-12-25) or a range of dates, both included (2026-12-24/2026-12-31);
        /// repeatable. None empties the calendar.
        #[arg(long = "date", value_name = "DATE|FIRST/LAST")]
        dates: Vec<String>,
    },
    /// Show one calendar.
    Get {
        #[arg(long)]
        app: String,
        #[arg(long)]
        name: String,
    },
    /// An app's calendars, by name.
    List {
        #[arg(long)]
        app: String,
    },
}

pub async fn run(
    client: &mut chime_proto::AuthedTimerClient,
    command: CalendarsCommand,
    out: Output,
) -> Result<String, CliError> {
    Ok(match command {
        CalendarsCommand::Put { app, name, dates } => {
            let put = client
                .put_calendar(pb::PutCalendarRequest { app, name, dates })
                .await?
                .into_inner();
            let c = put.calendar.unwrap_or_default();
            output::done(
                &format!(
                    "{} calendar {} of {} ({} dates or ranges); {} timers rewritten",
                    if put.created { "created" } else { "replaced" },
                    c.name,
                    c.app,
                    c.dates.len(),
                    put.timers_updated
                ),
                json!({
                    "calendar": calendar_json(&c),
                    "created": put.created,
                    "timers_updated": put.timers_updated,
                }),
                out,
            )
        }
        CalendarsCommand::Get { app, name } => {
            let c = client
                .get_calendar(pb::GetCalendarRequest { app, name })
                .await?
                .into_inner();
            calendars(&[c], out)
        }
        CalendarsCommand::List { app } => {
            let all = client
                .list_calendars(pb::ListCalendarsRequest { app })
                .await?
                .into_inner();
            calendars(&all.calendars, out)
        }
    })
}

fn calendar_json(c: &pb::Calendar) -> serde_json::Value {
    json!({
        "app": c.app,
        "name": c.name,
        "dates": c.dates,
        "updated_at": c.updated_at.map(output::rfc3339),
    })
}

fn calendars(all: &[pb::Calendar], out: Output) -> String {
    match out {
        Output::Json => {
            let v: Vec<_> = all.iter().map(calendar_json).collect();
            serde_json::to_string_pretty(&json!({ "calendars": v })).unwrap_or_default()
        }
        Output::Table => all
            .iter()
            .map(|c| format!("{}  {}", c.name, c.dates.join(" ")))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}
