//! Which worker of a group takes a run when its timer names a route other than
//! `least_busy`: chosen among the group's workers connected to any executor, as the
//! executors list them (`ExecutorService/ListWorkers`).

use chime_domain::{Route, TimerId};

/// One connected worker, fleet-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The instance of the executor it is connected to.
    pub instance: String,
    /// Its connection id on that executor.
    pub id: String,
    /// The name it gave, if any.
    pub name: String,
    pub registered_at_ms: i64,
}

impl Member {
    /// What identifies it across executors: its name when it gave one (so a worker that
    /// reconnects keeps its timers), else its connection.
    fn identity(&self) -> String {
        if self.name.is_empty() {
            format!("{}/{}", self.instance, self.id)
        } else {
            self.name.clone()
        }
    }
}

/// The order rosters are kept in: by identity, then connection.
pub fn order(a: &Member, b: &Member) -> std::cmp::Ordering {
    (a.identity(), &a.instance, &a.id).cmp(&(b.identity(), &b.instance, &b.id))
}

/// The member `route` gives a run of `timer`; `turn` counts the routed runs so far (round
/// robin). `None` for `least_busy` or an empty roster.
pub fn choose(route: Route, members: &[Member], timer: TimerId, turn: u64) -> Option<&Member> {
    let mut sorted: Vec<&Member> = members.iter().collect();
    sorted.sort_by(|a, b| order(a, b));
    match route {
        Route::LeastBusy => None,
        Route::RoundRobin => {
            let n = sorted.len() as u64;
            (n > 0).then(|| sorted[(turn % n) as usize])
        }
        // Rendezvous hashing: each worker's score for the timer, the highest wins. A worker
        // that joins takes only the timers it now scores highest for; one that leaves gives
        // up only its own.
        Route::ConsistentHash => sorted.into_iter().max_by_key(|m| {
            xxhash_rust::xxh3::xxh3_64(format!("{}\u{0}{}", timer.get(), m.identity()).as_bytes())
        }),
        Route::Failover => sorted
            .into_iter()
            .min_by_key(|m| (m.registered_at_ms, m.identity())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, at: i64) -> Member {
        Member {
            instance: "i1".into(),
            id: format!("w-{name}"),
            name: name.into(),
            registered_at_ms: at,
        }
    }

    fn id(n: i64) -> TimerId {
        TimerId::new(n).unwrap()
    }

    #[test]
    fn consistent_hash_keeps_timers_and_moves_only_a_share() {
        let ten: Vec<Member> = (0..10).map(|i| member(&format!("w{i}"), i)).collect();
        let owner = |members: &[Member], t: i64| {
            choose(Route::ConsistentHash, members, id(t), 0)
                .unwrap()
                .name
                .clone()
        };
        let before: Vec<String> = (1..=2_000).map(|t| owner(&ten, t)).collect();
        // The same roster in another order: the same owners.
        let mut shuffled = ten.clone();
        shuffled.reverse();
        assert!((1..=2_000).all(|t| owner(&shuffled, t) == before[t as usize - 1]));
        // Every worker gets a share.
        for m in &ten {
            let n = before.iter().filter(|o| **o == m.name).count();
            assert!((100..=300).contains(&n), "{}: {n}", m.name);
        }
        // w3 leaves: only its timers move.
        let nine: Vec<Member> = ten.iter().filter(|m| m.name != "w3").cloned().collect();
        for t in 1..=2_000 {
            let was = &before[t as usize - 1];
            if was != "w3" {
                assert_eq!(&owner(&nine, t), was, "timer {t} moved");
            }
        }
        // w10 joins: the timers that move all go to it, about a tenth of them.
        let mut eleven = ten.clone();
        eleven.push(member("w10", 10));
        let moved: Vec<i64> = (1..=2_000)
            .filter(|t| owner(&eleven, *t) != before[*t as usize - 1])
            .collect();
        assert!(moved.iter().all(|t| owner(&eleven, *t) == "w10"));
        assert!((100..=300).contains(&moved.len()), "{}", moved.len());
    }

    #[test]
    fn failover_takes_the_earliest_and_round_robin_takes_turns() {
        let members = vec![member("b", 20), member("a", 30), member("c", 10)];
        assert_eq!(
            choose(Route::Failover, &members, id(1), 0).unwrap().name,
            "c"
        );
        let turns: Vec<&str> = (0..6)
            .map(|turn| {
                choose(Route::RoundRobin, &members, id(1), turn)
                    .unwrap()
                    .name
                    .as_str()
            })
            .collect();
        assert_eq!(turns, ["a", "b", "c", "a", "b", "c"]);
        assert_eq!(choose(Route::LeastBusy, &members, id(1), 0), None);
        assert_eq!(choose(Route::Failover, &[], id(1), 0), None);
    }
}
