//! `worklane metrics`: the machine's numbers in the Prometheus text exposition (0.0.4), built
//! with `prometheus-client`. The state (holders, caps, waiters, STOP, the drain, the
//! dispatcher's rows, the budgets) is taken from the very document `slots --json` prints; the
//! counts and histograms of what happened (takeovers, halts, waits, run times) from the
//! event journal, as far back as it reaches.
//!
//! Printed on stdout, written atomically to a file for node_exporter's textfile collector
//! (`--textfile`), or served over HTTP (`--listen`): `serve.rs`.

use crate::cli::MetricsArgs;
use crate::exit::{self, Failure};
use crate::json;
use crate::views::Around;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::process::ExitCode;
use worklane_journal::{Batch, Event};

mod serve;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A family of gauges by label, registered under `name`.
fn gauges(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    registry.register(name, help, family.clone());
    family
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let gauge = Gauge::<i64>::default();
    gauge.set(value);
    registry.register(name, help, gauge);
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The kinds `slots --json` names a lock file by.
const KINDS: [&str; 7] = ["agent", "test", "job", "full-run", "role", "lease", "lock"];

/// The kinds of slot a take waits for in line, and whose holds are timed.
const SLOT_KINDS: [&str; 4] = ["agent", "test", "job", "full-run"];

/// The state's part: everything read from `slots --json`'s document.
fn state(registry: &mut Registry, doc: &json::Slots) {
    let holders = gauges(
        registry,
        "holders",
        "Lock files that count as held, by kind (slots --json: entries whose counts is true)",
    );
    for kind in KINDS {
        let n = doc
            .slots
            .iter()
            .filter(|s| s.kind == kind && s.counts)
            .count();
        holders
            .get_or_create(&labels(&[("kind", kind)]))
            .set(count(n));
    }
    let caps = gauges(
        registry,
        "cap",
        "The cap in force by kind (0 for every kind while the config cannot be used)",
    );
    let usable = doc.config_problem.is_none();
    for (kind, cap) in [
        ("agent", i64::from(doc.max_agents)),
        ("test", i64::from(doc.max_test_runs)),
        ("job", i64::from(doc.max_jobs)),
        ("full-run", i64::from(usable)),
    ] {
        caps.get_or_create(&labels(&[("kind", kind)])).set(cap);
    }
    let waiters = gauges(registry, "waiters", "Live waiters in line, by kind");
    for kind in SLOT_KINDS {
        let n = doc.line.iter().filter(|w| w.kind == kind && w.live).count();
        waiters
            .get_or_create(&labels(&[("kind", kind)]))
            .set(count(n));
    }
    gauge(
        registry,
        "stop",
        "1 while an emergency STOP is in force",
        i64::from(doc.stop.is_some()),
    );
    gauge(
        registry,
        "drain",
        "1 while an update drain is in force",
        i64::from(matches!(doc.drain, json::Drain::InForce(_))),
    );
    let rows = gauges(
        registry,
        "dispatcher_rows",
        "The dispatcher's queued and starting attempts (their status entries), by state",
    );
    for state in ["queued", "starting"] {
        let n = doc
            .queue
            .attempts
            .iter()
            .filter(|a| a["state"].as_str() == Some(state))
            .count();
        rows.get_or_create(&labels(&[("state", state)]))
            .set(count(n));
    }
    let left = gauges(
        registry,
        "budget_left",
        "Calls left in a credential's last seen window, by provider, credential (its key's \
         16-hex hash, as its budget files and the journal name it) and resource",
    );
    let paused = gauges(
        registry,
        "budget_paused",
        "1 while a credential's calls are paused, by provider and credential",
    );
    let in_flight = gauges(
        registry,
        "budget_in_flight",
        "A model provider's calls taken whose responses are not yet recorded, by provider and \
         credential",
    );
    let waiting = gauges(
        registry,
        "budget_waiting",
        "Calls waiting for a credential's budget in a proxy, by provider and credential",
    );
    let in_flight_units = gauges(
        registry,
        "budget_in_flight_units",
        "The units of each dimension the calls in flight hold, by provider, credential and \
         resource",
    );
    let big = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for budget in &doc.budgets {
        // By the key's hash, as the journal names it: a rank would move between keys.
        let credential = if budget.key.is_empty() {
            budget.credential.to_string()
        } else {
            budget.key.clone()
        };
        let who = [
            ("provider", budget.provider.as_str()),
            ("credential", credential.as_str()),
        ];
        paused
            .get_or_create(&labels(&who))
            .set(i64::from(budget.paused_until.is_some()));
        in_flight
            .get_or_create(&labels(&who))
            .set(count(budget.in_flight));
        waiting
            .get_or_create(&labels(&who))
            .set(big(budget.waiting));
        for resource in &budget.resources {
            let mut at = who.to_vec();
            at.push(("resource", resource.name.as_str()));
            left.get_or_create(&labels(&at)).set(big(resource.left));
            in_flight_units
                .get_or_create(&labels(&at))
                .set(big(resource.in_flight));
        }
    }
}

/// A journal line's slot kind as a label: one of [`SLOT_KINDS`], else `other` (a line another
/// writer made up must not add series without end).
fn known_kind(kind: &str) -> &'static str {
    SLOT_KINDS
        .into_iter()
        .find(|k| *k == kind)
        .unwrap_or("other")
}

/// The journal's part: what happened, counted and measured from its events.
fn history(registry: &mut Registry, journal: &Batch) {
    let takeovers = Counter::<u64>::default();
    registry.register(
        "takeovers",
        "Locks taken over from holders proved dead, in the journal",
        takeovers.clone(),
    );
    let halts = Family::<Labels, Counter>::default();
    registry.register(
        "halts",
        "Commands halted by STOP, in the journal, by who halted them (supervisor, worklane)",
        halts.clone(),
    );
    for by in ["supervisor", "worklane"] {
        halts.get_or_create(&labels(&[("by", by)])).inc_by(0);
    }
    fn histogram() -> Histogram {
        Histogram::new(exponential_buckets(0.01, 4.0, 10))
    }
    // By the kind of slot: a build's many short job-token holds would otherwise swamp the
    // agents' runs.
    let by_kind = || Family::<Labels, Histogram>::new_with_constructor(histogram as fn() -> _);
    let queue_wait = by_kind();
    registry.register(
        "queue_wait_seconds",
        "How long work waited for its slot, by kind: each take of a run (0 when it did not \
         wait) and each dispatched attempt (an agent slot), from its queue start to its \
         admission",
        queue_wait.clone(),
    );
    let claim_wait = histogram();
    registry.register(
        "admission_to_claim_seconds",
        "From a dispatched attempt's admission to its driver's claim",
        claim_wait.clone(),
    );
    let run = by_kind();
    registry.register(
        "run_seconds",
        "How long a slot was held, by kind, from its take (or a driver's claim) to its release",
        run.clone(),
    );
    for kind in SLOT_KINDS {
        // Every kind's series exists from the first scrape, empty until something happens.
        let _ = queue_wait.get_or_create(&labels(&[("kind", kind)]));
        let _ = run.get_or_create(&labels(&[("kind", kind)]));
    }
    let dropped = Counter::<u64>::default();
    registry.register(
        "journal_dropped_events",
        "Events writers could not append (a full disk, an unwritable journal) and said later",
        dropped.clone(),
    );
    let seconds = |ms: u64| ms as f64 / 1000.0;
    for entry in &journal.entries {
        dropped.inc_by(entry.dropped);
        match &entry.event {
            Event::Takeover { .. } => {
                takeovers.inc();
            }
            Event::Halt { by, .. } => {
                halts.get_or_create(&labels(&[("by", by.as_str())])).inc();
            }
            Event::SlotTaken {
                owner,
                waited_ms,
                slot_kind,
                ..
            } if owner != "worklane dispatcher" => queue_wait
                .get_or_create(&labels(&[("kind", known_kind(slot_kind))]))
                .observe(seconds(*waited_ms)),
            Event::DispatchAdmitted { waited_ms, .. } => queue_wait
                .get_or_create(&labels(&[("kind", "agent")]))
                .observe(seconds(*waited_ms)),
            Event::DispatchClaimed { admitted_ms, .. } => {
                claim_wait.observe(seconds(*admitted_ms));
            }
            Event::SlotReleased {
                held_ms, slot_kind, ..
            } => run
                .get_or_create(&labels(&[("kind", known_kind(slot_kind))]))
                .observe(seconds(*held_ms)),
            _ => {}
        }
    }
    gauge(
        registry,
        "journal_skipped_lines",
        "Torn or unreadable journal lines skipped (a writer killed mid-line leaves one)",
        i64::try_from(journal.skipped).unwrap_or(i64::MAX),
    );
    gauge(
        registry,
        "journal_mistyped_lines",
        "Whole journal lines skipped because a field has the wrong type for its kind (another \
         writer's mistake)",
        i64::try_from(journal.mistyped).unwrap_or(i64::MAX),
    );
}

/// The exposition of `doc` (`slots --json`'s document) and `journal`.
fn render(doc: &json::Slots, journal: &Batch) -> String {
    let mut registry = Registry::with_prefix("worklane");
    state(&mut registry, doc);
    history(&mut registry, journal);
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
    text
}

/// The exposition of the machine now.
fn exposition(pool: &worklane_admission::Pool) -> Result<String, Failure> {
    let snapshot = pool.snapshot()?;
    let around = Around::of(pool, &snapshot);
    let doc = crate::slots::to_json(&snapshot, &around);
    let journal = worklane_journal::read(pool.dir())
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    Ok(render(&doc, &journal))
}

pub(crate) fn metrics(args: &MetricsArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    if let Some(path) = &args.textfile {
        serve::write_textfile(path, &exposition(&pool)?)?;
    } else if let Some(addr) = &args.listen {
        serve::listen(addr, &|| exposition(&pool))?;
    } else {
        crate::out::bytes(exposition(&pool)?.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
