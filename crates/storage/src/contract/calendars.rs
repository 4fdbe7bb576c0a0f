//! [`Calendars`]: an app's exclusion calendars, created, replaced and read back by name.

use chime_domain::{AppName, Calendar, CalendarName, DateRange, Timestamp};

use crate::Calendars;

use super::*;

fn calendar(app: &str, name: &str, dates: &[&str], at: i64) -> Calendar {
    Calendar {
        app: AppName::parse(app).unwrap(),
        name: CalendarName::parse(name).unwrap(),
        dates: dates.iter().map(|d| DateRange::parse(d).unwrap()).collect(),
        updated_at: Timestamp::from_millis(at),
    }
}

pub async fn calendars_are_put_by_name_and_read_per_app<S: Calendars + ?Sized>(store: Arc<S>) {
    let holidays = calendar(
        "cal-a",
        "holidays",
        &["2026-12-25", "2026-12-24/2026-12-26"],
        T0,
    );
    assert!(store.put_calendar(&holidays).await.unwrap(), "created");
    let audit = calendar("cal-a", "audit", &["2027-03-31"], T0);
    assert!(store.put_calendar(&audit).await.unwrap());
    // Same name in another app: its own.
    let other = calendar("cal-b", "holidays", &["2026-01-01"], T0);
    assert!(store.put_calendar(&other).await.unwrap());
    // Replacing keeps one, with the new dates.
    let replaced = calendar("cal-a", "holidays", &["2026-12-31"], T0 + 1_000);
    assert!(!store.put_calendar(&replaced).await.unwrap(), "replaced");

    let app = AppName::parse("cal-a").unwrap();
    let all = store.list_calendars(&app).await.unwrap();
    assert_eq!(all, vec![audit.clone(), replaced.clone()], "name order");
    let some = store
        .get_calendars(
            &app,
            &[
                CalendarName::parse("holidays").unwrap(),
                CalendarName::parse("missing").unwrap(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(some, vec![replaced]);
    let none = store
        .list_calendars(&AppName::parse("cal-none").unwrap())
        .await
        .unwrap();
    assert!(none.is_empty());
}
