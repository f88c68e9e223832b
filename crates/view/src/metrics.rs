//! The machine's numbers in the Prometheus text exposition (0.0.4), as `worklane metrics`
//! prints and serves them, built with `prometheus-client`. The state (holders, caps, waiters, STOP, the drain, the
//! dispatcher's rows, the budgets) is taken from the very document `slots --json` prints; the
//! counts and histograms of what happened (takeovers, halts, waits, run times) from the
//! event journal, as far back as it reaches.
//!
//! Every series is listed in `docs/cli.md` (`worklane metrics`). [`serve`] writes the text to
//! a file for node_exporter's textfile collector, or serves it over HTTP.

use crate::context::Around;
pub mod serve;

use crate::doc;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use worklane_journal::Batch;
use worklane_journal::tally::{Hist, SLOT_KINDS};

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

/// The state's part: everything read from `slots --json`'s document.
fn state(registry: &mut Registry, doc: &doc::Slots) {
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
        i64::from(matches!(doc.drain, doc::Drain::InForce(_))),
    );
    // Each held slot's run, measured in its cgroup (containment on): what a slot costs.
    let cpu = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "slot_cpu_seconds",
        "CPU time the processes of a held slot's run used, from its cgroup (cpu.stat)",
        cpu.clone(),
    );
    let procs = gauges(
        registry,
        "slot_processes",
        "Processes in a held slot's run's cgroup (what its command left running included)",
    );
    for slot in doc.slots.iter().filter(|s| s.counts) {
        let Some(cgroup) = &slot.cgroup else {
            continue;
        };
        let labels = labels(&[("slot", slot.name.as_str()), ("kind", slot.kind)]);
        if let Some(us) = cgroup.cpu_usec {
            cpu.get_or_create(&labels).set(us as f64 / 1e6);
        }
        procs.get_or_create(&labels).set(count(cgroup.procs.len()));
    }
    gauge(
        registry,
        "protocol_refused",
        "1 while the slot directory's protocol.json asks what this worklane cannot keep (a \
         higher level, an unknown extension): its takes are refused",
        i64::from(
            doc.problems
                .iter()
                .any(|p| p.name == worklane_admission::protocol::PROTOCOL_FILE),
        ),
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

/// Histograms already counted (a journal's [`Tally`](worklane_journal::tally::Tally)), one series per label set, encoded as
/// Prometheus histograms.
#[derive(Debug)]
struct Counted(Vec<(Labels, Hist)>);

impl EncodeMetric for Counted {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (labels, hist) in &self.0 {
            encoder
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(hist.sum, hist.count, &hist.pairs(), None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The histograms of `by_kind` labelled `kind`, every slot kind present (empty until
/// something happens), then any `other`.
fn by_kind(by_kind: &std::collections::BTreeMap<String, Hist>) -> Counted {
    let mut series: Vec<(Labels, Hist)> = SLOT_KINDS
        .iter()
        .map(|kind| {
            (
                labels(&[("kind", kind)]),
                by_kind.get(*kind).cloned().unwrap_or_default(),
            )
        })
        .collect();
    if let Some(other) = by_kind.get("other") {
        series.push((labels(&[("kind", "other")]), other.clone()));
    }
    Counted(series)
}

/// The journal's part: what happened, counted and measured from its events, and carried
/// across its rotations (the current file's `totals`), so that no counter goes down when a
/// rotation drops the older file.
fn history(registry: &mut Registry, journal: &Batch) {
    let tally = worklane_journal::tally::total(&journal.entries);
    let takeovers = Counter::<u64>::default();
    takeovers.inc_by(tally.takeovers);
    registry.register(
        "takeovers",
        "Locks taken over from holders proved dead, in the journal",
        takeovers,
    );
    let gone = Counter::<u64>::default();
    gone.inc_by(tally.gone);
    registry.register(
        "holders_gone",
        "Slots whose holders were found dead with nobody taking them over, in the journal",
        gone,
    );
    let halts = Family::<Labels, Counter>::default();
    for by in ["supervisor", "worklane"] {
        halts.get_or_create(&labels(&[("by", by)])).inc_by(0);
    }
    for (by, n) in &tally.halts {
        halts
            .get_or_create(&labels(&[("by", by.as_str())]))
            .inc_by(*n);
    }
    registry.register(
        "halts",
        "Commands halted by STOP, in the journal, by who halted them (supervisor, worklane)",
        halts,
    );
    // By the kind of slot: a build's many short job-token holds would otherwise swamp the
    // agents' runs.
    registry.register(
        "queue_wait_seconds",
        "How long work waited for its slot, by kind: each take of a run (0 when it did not \
         wait) and each dispatched attempt (an agent slot), from its queue start to its \
         admission",
        by_kind(&tally.queue_wait),
    );
    registry.register(
        "admission_to_claim_seconds",
        "From a dispatched attempt's admission to its driver's claim",
        Counted(vec![(Vec::new(), tally.claim_wait.clone())]),
    );
    registry.register(
        "run_seconds",
        "How long a slot was held, by kind, from its take (or a driver's claim) to its release",
        by_kind(&tally.run),
    );
    let dropped = Counter::<u64>::default();
    dropped.inc_by(tally.dropped);
    registry.register(
        "journal_dropped_events",
        "Events writers could not append (a full disk, an unwritable journal) and said later",
        dropped,
    );
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
pub fn render(doc: &doc::Slots, journal: &Batch) -> String {
    let mut registry = Registry::with_prefix("worklane");
    state(&mut registry, doc);
    history(&mut registry, journal);
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
    text
}

/// Why the exposition could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The slot directory could not be looked at.
    #[error(transparent)]
    Look(#[from] worklane_admission::look::Error),
    /// The event journal could not be read.
    #[error(transparent)]
    Journal(#[from] worklane_journal::error::Error),
}

/// The exposition of the machine now: the pool's snapshot (retiring what is gone, so that
/// `worklane_holders_gone_total` counts it), what is around it, and the journal.
pub fn exposition(pool: &worklane_admission::Pool) -> Result<String, Error> {
    let snapshot = pool.snapshot_retiring()?;
    let around = Around::of(pool, &snapshot);
    let doc = crate::slots::to_json(&snapshot, &around);
    let journal = worklane_journal::read(pool.dir())?;
    Ok(render(&doc, &journal))
}
