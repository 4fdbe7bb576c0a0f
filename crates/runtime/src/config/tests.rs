//! Loading, layering, validation and `--dump-config`.

// figment's Jail API fixes its closures' (large) error type.
#![allow(clippy::result_large_err)]

use super::*;

fn load_with(file: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    // Jail gives each test a private environment and working directory.
    let mut out = None;
    figment::Jail::expect_with(|jail| {
        jail.clear_env();
        if let Some(body) = file {
            jail.create_file("chime.toml", body)?;
        }
        for (k, v) in env {
            jail.set_env(k, v);
        }
        out = Some(Config::load(file.map(|_| Path::new("chime.toml"))));
        Ok(())
    });
    out.expect("jail ran")
}

#[test]
fn loading_nothing_gives_the_built_in_defaults() {
    let c = load_with(None, &[]).unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.gateway.http_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(c.gateway.grpc_addr.to_string(), "0.0.0.0:50051");
    assert_eq!(c.executor.addr.to_string(), "0.0.0.0:50061");
    assert_eq!(c.migrator.addr, None);
    assert_eq!(c.redis.prefix, "chime");
    assert_eq!(c.buckets.get(), 16);
    assert_eq!(c.executor.max_in_flight, 2048);
    assert_eq!(c.executor.claim_linger.get(), Duration::from_millis(20));
    assert_eq!(c.migrator.lead.get(), Duration::from_secs(60));
    assert_eq!(c.migrator.max_ahead, 100);
    assert!(c.database_url().is_err());
}

#[test]
fn env_overrides_file_overrides_defaults() {
    let file = r#"
        buckets = 8
        [database]
        url = "postgres://file/db"
        [redis]
        prefix = "from-file"
        [migrator]
        lead = "10m"
    "#;
    let c = load_with(
        Some(file),
        &[
            ("CHIME_DATABASE_URL", "postgres://env/db"),
            ("CHIME_BUCKETS", "32"),
            ("CHIME_EXECUTOR_ENDPOINTS", "http://a:50061, http://b:50061"),
            ("CHIME_HTTP_ADDR", "127.0.0.1:9000"),
            ("CHIME_SCHEDULER__LEASE_TTL", "3s"),
        ],
    )
    .unwrap();
    assert_eq!(c.database.url.as_deref(), Some("postgres://env/db"));
    assert_eq!(c.buckets.get(), 32);
    assert_eq!(c.redis.prefix, "from-file");
    assert_eq!(c.migrator.lead.get(), Duration::from_secs(600));
    assert_eq!(
        c.scheduler.executor_endpoints,
        vec!["http://a:50061".to_owned(), "http://b:50061".to_owned()]
    );
    assert_eq!(c.gateway.http_addr.to_string(), "127.0.0.1:9000");
    assert_eq!(c.scheduler.lease_ttl.get(), Duration::from_secs(3));
}

#[test]
fn the_test_harness_variables_are_not_settings() {
    let c = load_with(
        None,
        &[
            ("CHIME_TEST_DATABASE_URL", "postgres://h/db"),
            ("CHIME_TEST_MYSQL_URL", "mysql://root@h/test"),
            ("CHIME_TEST_SOMETHING_NEW", "x"),
        ],
    )
    .unwrap();
    assert_eq!(c, Config::default());
    // Anything else unknown is still refused.
    assert!(load_with(None, &[("CHIME_NOT_A_SETTING", "x")]).is_err());
}

#[test]
fn bad_values_are_reported_with_their_key() {
    let err = load_with(None, &[("CHIME_BUCKETS", "0")])
        .unwrap_err()
        .to_string()
        .to_lowercase();
    assert!(err.contains("buckets"), "{err}");
    let err = load_with(None, &[("CHIME_HTTP_ADDR", "not-an-addr")])
        .unwrap_err()
        .to_string()
        .to_lowercase();
    assert!(err.contains("http_addr"), "{err}");
    let err = load_with(None, &[("CHIME_MIGRATOR__LEAD", "soon")])
        .unwrap_err()
        .to_string()
        .to_lowercase();
    assert!(err.contains("lead"), "{err}");
    let err = load_with(None, &[("CHIME_MIGRATOR__INTERVAL", "30s")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("migrator.interval"), "{err}");
    let err = load_with(None, &[("CHIME_EXECUTOR__CLAIM_LINGER", "1s")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("executor.claim_linger"), "{err}");
    let err = load_with(
        None,
        &[("CHIME_CALLBACK_ALLOW_NETWORKS", "10.0.0.0/8,intranet")],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("callbacks") && err.contains("intranet"),
        "{err}"
    );
    let opened = load_with(
        None,
        &[("CHIME_CALLBACK_ALLOW_NETWORKS", "10.0.0.0/8, fd00::/8")],
    )
    .unwrap()
    .network_policy()
    .unwrap();
    assert!(opened.check("10.1.2.3".parse().unwrap()).is_ok());
    assert!(opened.check("192.168.0.1".parse().unwrap()).is_err());
    let err = load_with(Some("[gateway]\nhttp_port = 1\n"), &[])
        .unwrap_err()
        .to_string()
        .to_lowercase();
    assert!(err.contains("http_port"), "{err}");
    assert!(Config::load(Some(Path::new("/nonexistent/chime.toml"))).is_err());
}

#[test]
fn dump_is_valid_toml_that_loads_back_with_passwords_masked() {
    let c = load_with(
        None,
        &[
            (
                "CHIME_DATABASE_URL",
                "postgres://chime:s3cret@db:5432/chime",
            ),
            ("CHIME_REDIS_URL", "redis://cache:6379"),
        ],
    )
    .unwrap();
    let dumped = c.dump();
    assert!(!dumped.contains("s3cret"), "{dumped}");
    assert!(
        dumped.contains("postgres://chime:***@db:5432/chime"),
        "{dumped}"
    );
    let back = load_with(Some(&dumped), &[]).unwrap();
    assert_eq!(back.redis, c.redis);
    assert_eq!(back.scheduler, c.scheduler);
    assert_eq!(back.buckets, c.buckets);
}

#[test]
fn dump_config_flag_prints_and_stops() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }
    let mut out = None;
    figment::Jail::expect_with(|jail| {
        jail.clear_env();
        jail.set_env("CHIME_REDIS_PREFIX", "dumped");
        let dump = Cli::parse_from(["chime-test", "--dump-config"]);
        let run = Cli::parse_from(["chime-test"]);
        let mut printed = Vec::new();
        let stopped = dump
            .common
            .load_or_dump(Config::default(), &mut printed)
            .map(|c| c.is_none());
        let started = run
            .common
            .load_or_dump(Config::default(), &mut Vec::new())
            .map(|c| c.is_some());
        out = Some((
            stopped,
            started,
            String::from_utf8_lossy(&printed).into_owned(),
        ));
        Ok(())
    });
    let (stopped, started, printed) = out.expect("jail ran");
    assert!(stopped.unwrap() && started.unwrap());
    assert!(printed.contains("prefix = \"dumped\""), "{printed}");
}

#[test]
fn other_defaults_still_yield_to_file_and_env() {
    let mut defaults = Config::default();
    defaults.migrator.lead = Seconds::secs(30);
    let mut out = None;
    figment::Jail::expect_with(|jail| {
        jail.clear_env();
        let plain = Config::load_over(defaults.clone(), None);
        jail.set_env("CHIME_MIGRATOR__LEAD", "1h");
        let overridden = Config::load_over(defaults.clone(), None);
        out = Some((plain, overridden));
        Ok(())
    });
    let (plain, overridden) = out.expect("jail ran");
    assert_eq!(plain.unwrap().migrator.lead, Seconds::secs(30));
    assert_eq!(overridden.unwrap().migrator.lead, Seconds::secs(3600));
}

#[test]
fn masking_leaves_password_free_urls_alone() {
    assert_eq!(
        mask_password("sqlite://chime-dev.db"),
        "sqlite://chime-dev.db"
    );
    assert_eq!(mask_password("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(mask_password("redis://:pw@h:6379"), "redis://:***@h:6379");
}

#[test]
fn partitions_are_kept_a_week_ahead_and_at_least_a_day() {
    let c = load_with(None, &[]).unwrap();
    assert_eq!(
        c.retention.partitions_ahead.get(),
        Duration::from_secs(7 * 86_400)
    );
    let err = load_with(None, &[("CHIME_RETENTION__PARTITIONS_AHEAD", "12h")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("retention.partitions_ahead"), "{err}");
    let c = load_with(None, &[("CHIME_RETENTION__PARTITIONS_AHEAD", "35d")]).unwrap();
    assert_eq!(
        c.retention.partitions_ahead.get(),
        Duration::from_secs(35 * 86_400)
    );
}

#[test]
fn the_horizon_spreads_timers_over_a_quarter_of_the_lead() {
    let c = load_with(None, &[("CHIME_MIGRATOR__LEAD", "20s")]).unwrap();
    let h = c.horizon();
    assert_eq!(h.lead, Duration::from_secs(20));
    assert_eq!(h.spread, Duration::from_secs(5));
}

/// One row of the settings table in `docs/configuration.md`.
struct Documented {
    key: String,
    env: Option<String>,
    default: String,
}

fn documented_settings() -> Vec<Documented> {
    let doc = include_str!("../../../../docs/configuration.md");
    let unquote = |s: &str| s.trim().trim_matches('`').to_owned();
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            Documented {
                key: unquote(cells[1]),
                env: Some(unquote(cells[2])).filter(|e| !e.is_empty()),
                default: cells[3].to_owned(),
            }
        })
        .collect()
}

/// Every leaf of a TOML table as (dotted key, value as written in the docs).
fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut std::collections::BTreeMap<String, String>,
) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            toml::Value::String(s) => {
                out.insert(key, s.clone());
            }
            other => {
                out.insert(key, other.to_string());
            }
        }
    }
}

fn dumped(c: &Config) -> std::collections::BTreeMap<String, String> {
    let table: toml::Table = toml::from_str(&c.dump()).expect("the dump is TOML");
    let mut out = std::collections::BTreeMap::new();
    flatten("", &table, &mut out);
    out
}

/// A value of the right type for a setting without a default, as TOML.
fn sample_value(key: &str) -> &'static str {
    if key.ends_with("url") {
        "\"postgres://host/db\""
    } else if key.ends_with("addr") {
        "\"127.0.0.1:9999\""
    } else if key.ends_with("token") {
        "\"a-long-enough-test-token\""
    } else if key.ends_with("threads") {
        "3"
    } else {
        "\"http://host:1\""
    }
}

#[test]
fn every_documented_setting_exists_with_its_documented_default() {
    let documented = documented_settings();
    assert!(documented.len() > 30, "the settings table was not found");
    let defaults = dumped(&Config::default());
    for d in &documented {
        if let Some(env) = &d.env {
            let flat = env
                .strip_prefix("CHIME_")
                .expect("variables start with CHIME_");
            assert_eq!(env_key(flat), d.key, "{env} sets another key");
        }
        match defaults.get(&d.key) {
            // An empty list is documented as no default.
            Some(value) if value == "[]" => assert_eq!(d.default, "none", "default of {}", d.key),
            Some(value) => assert_eq!(*value, d.default, "default of {}", d.key),
            None => {
                // No default: the docs say so, and the key is real (setting it shows in
                // the effective configuration).
                assert!(
                    d.default == "none" || d.default == "per service",
                    "{} is documented with default {} but has none",
                    d.key,
                    d.default
                );
                let (section, leaf) = d.key.rsplit_once('.').unwrap_or(("", &d.key));
                let body = if section.is_empty() {
                    format!("{leaf} = {}\n", sample_value(leaf))
                } else if section == "tls" {
                    // The TLS files go together: a certificate and key with each setting.
                    let mut lines = vec![("cert", "/tls.crt"), ("key", "/tls.key")];
                    lines.retain(|(k, _)| *k != leaf);
                    lines.push((leaf, "/sample.pem"));
                    let lines: Vec<String> = lines
                        .iter()
                        .map(|(k, v)| format!("{k} = \"{v}\""))
                        .collect();
                    format!("[tls]\n{}\n", lines.join("\n"))
                } else {
                    format!("[{section}]\n{leaf} = {}\n", sample_value(leaf))
                };
                let loaded = load_with(Some(&body), &[]).unwrap_or_else(|e| panic!("{body}: {e}"));
                assert!(
                    dumped(&loaded).contains_key(&d.key),
                    "{} is not a setting",
                    d.key
                );
            }
        }
    }
    for key in defaults.keys() {
        assert!(
            documented.iter().any(|d| &d.key == key),
            "{key} is not documented in docs/configuration.md"
        );
    }
}

#[test]
fn auth_is_required_by_default_and_needs_a_strong_bootstrap_token() {
    let c = load_with(None, &[]).unwrap();
    assert_eq!(c.auth.mode, AuthMode::Required);
    let err = c.bootstrap_token().unwrap_err().to_string();
    assert!(
        err.contains("CHIME_BOOTSTRAP_TOKEN") && err.contains("CHIME_AUTH=off"),
        "{err}"
    );
    let off = load_with(None, &[("CHIME_AUTH", "off")]).unwrap();
    assert_eq!(off.bootstrap_token().unwrap(), None);
    for weak in ["", "short", "has a space in it!!"] {
        let err = load_with(None, &[("CHIME_BOOTSTRAP_TOKEN", weak)]).unwrap_err();
        assert!(
            err.to_string().contains("bootstrap_token"),
            "{weak:?}: {err}"
        );
    }
    let good = "0123456789abcdef-admin";
    let c = load_with(
        None,
        &[
            ("CHIME_BOOTSTRAP_TOKEN", good),
            ("CHIME_TOKEN", "client side"),
        ],
    )
    .unwrap();
    assert_eq!(c.bootstrap_token().unwrap(), Some(good));
    assert!(!c.dump().contains(good));
    assert!(load_with(None, &[("CHIME_AUTH", "maybe")]).is_err());
}

#[test]
fn the_build_commit_in_the_environment_is_no_setting() {
    assert!(load_with(None, &[("CHIME_COMMIT", "0123abcd-dirty")]).is_ok());
}

#[test]
fn tls_files_go_together_and_are_read_at_start() {
    let err = load_with(None, &[("CHIME_TLS_CERT", "/etc/chime/tls.crt")]).unwrap_err();
    assert!(err.to_string().contains("tls.cert and tls.key"), "{err}");
    let err = load_with(None, &[("CHIME_TLS_CLIENT_CA", "/etc/chime/ca.crt")]).unwrap_err();
    assert!(err.to_string().contains("tls.client_ca"), "{err}");
    let c = load_with(
        None,
        &[
            ("CHIME_TLS_CERT", "/nonexistent/tls.crt"),
            ("CHIME_TLS_KEY", "/nonexistent/tls.key"),
        ],
    )
    .unwrap();
    let err = crate::Tls::load(&c.tls).unwrap_err().to_string();
    assert!(
        err.contains("tls.cert") && err.contains("/nonexistent/tls.crt"),
        "{err}"
    );
    assert!(crate::Tls::load(&Config::default().tls).unwrap().is_none());
    let bad = crate::Tls::from_pem(b"not pem".to_vec(), b"nor this".to_vec(), None, None);
    assert!(bad.unwrap_err().to_string().contains("tls.cert"));
}

#[test]
fn worker_threads_are_a_positive_count_or_the_service_default() {
    assert_eq!(load_with(None, &[]).unwrap().worker_threads, None);
    let c = load_with(None, &[("CHIME_WORKER_THREADS", "4")]).unwrap();
    assert_eq!(c.worker_threads, NonZeroUsize::new(4));
    let err = load_with(None, &[("CHIME_WORKER_THREADS", "0")])
        .unwrap_err()
        .to_string()
        .to_lowercase();
    assert!(err.contains("worker_threads"), "{err}");
}

#[test]
fn the_runtime_has_the_configured_threads_else_the_service_default() {
    let workers = |configured, default| {
        build_runtime(configured, default)
            .expect("a runtime")
            .metrics()
            .num_workers()
    };
    assert_eq!(workers(NonZeroUsize::new(3), RuntimeThreads::One), 3);
    assert_eq!(workers(NonZeroUsize::new(2), RuntimeThreads::PerCpu), 2);
    match std::env::var("TOKIO_WORKER_THREADS") {
        // tokio's own variable overrides a default, not a setting.
        Ok(n) => assert_eq!(workers(None, RuntimeThreads::One).to_string(), n),
        Err(_) => {
            assert_eq!(workers(None, RuntimeThreads::One), 1);
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            assert_eq!(workers(None, RuntimeThreads::PerCpu), cpus);
        }
    }
}
