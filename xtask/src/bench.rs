//! `cargo xtask bench`: runs the criterion benches that need nothing beyond the workspace, with
//! short measurement times, and prints one Markdown table of their medians (the "Current" table
//! at the top of BENCHMARKS.md), then a second of the goals of issue 38 ([`GOALS`]): each ratio
//! of a primitive to its floor, or each bound, beside its goal and whether this run met it.
//!
//! [`bench()`] builds [`PREREQUISITES`] (the release binaries the benches run), runs [`BENCHES`]
//! (every bench but `fleet`) with [`WARM_UP_SECS`] and [`MEASUREMENT_SECS`] (or
//! `--measurement-time SECS`), then turns each `new/estimates.json` under criterion's directory
//! ([`collect`]) into the table. `--table-only` prints the table of the results already there
//! without running anything.
//!
//! The table is built by [`markdown_table`], a pure function of the benches' `estimates.json`
//! texts, so that its format is tested without running a bench.

use crate::{USAGE, exit};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The benches `cargo xtask bench` runs: every bench of `worklane-benches` except `fleet`,
/// which needs an `etcd` binary and `protoc` (it is behind the crate's `fleet` feature, so a
/// plain `cargo bench -p worklane-benches` leaves it out too).
pub(crate) const BENCHES: &[&str] = &[
    "guard",
    "slotfile",
    "identity",
    "lease",
    "admission",
    "budget",
    "dispatcher",
    "line",
    "proxy",
    "views",
    "journal",
    "jobserver",
];

/// The release binaries the benches run, each with the cargo arguments that build it: the
/// lease stress runs `lease-holder` (a test seam), the CLI bench runs `worklane`.
pub(crate) const PREREQUISITES: &[&[&str]] = &[
    &[
        "build",
        "--release",
        "-p",
        "worklane-lease",
        "--features",
        "test-seams",
        "--bin",
        "lease-holder",
    ],
    &["build", "--release", "-p", "worklane"],
];

/// Criterion's warm-up and measurement times, in seconds, unless `--measurement-time` says
/// otherwise. Groups that set their own (the CLI per run, the dispatcher's recovery, the
/// line's hand-over, spawning flock(1)) keep theirs.
pub(crate) const WARM_UP_SECS: &str = "1";
/// See [`WARM_UP_SECS`].
pub(crate) const MEASUREMENT_SECS: &str = "3";

/// `cargo xtask bench`: builds what the benches run ([`PREREQUISITES`]), runs
/// [`BENCHES`] with short warm-up and measurement times, then prints the Markdown table
/// of every result criterion holds (`target/criterion`, or `$CARGO_TARGET_DIR/criterion`).
/// Criterion keeps the results of earlier runs, so a bench left out of this run (`fleet`)
/// keeps its last row; remove `target/criterion` first for a table of this run alone.
pub(crate) fn bench(args: &[String]) -> ExitCode {
    let mut measurement = MEASUREMENT_SECS.to_owned();
    let mut table_only = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--table-only" => table_only = true,
            "--measurement-time" => match args.next() {
                Some(secs) if secs.parse::<f64>().is_ok_and(|s| s > 0.0) => {
                    measurement.clone_from(secs);
                }
                other => {
                    eprintln!(
                        "xtask bench: --measurement-time takes seconds above 0 (got {other:?})"
                    );
                    return ExitCode::from(exit::USAGE);
                }
            },
            other => {
                eprintln!("xtask bench: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(exit::USAGE);
            }
        }
    }
    let root = crate::workspace_root();
    if !table_only {
        let cargo = crate::cargo();
        let mut runs: Vec<Vec<String>> = PREREQUISITES
            .iter()
            .map(|args| args.iter().map(|a| (*a).to_owned()).collect())
            .collect();
        let mut run = vec![
            "bench".to_owned(),
            "-p".to_owned(),
            "worklane-benches".to_owned(),
        ];
        for name in BENCHES {
            run.push("--bench".to_owned());
            run.push((*name).to_owned());
        }
        run.extend(
            [
                "--",
                "--warm-up-time",
                WARM_UP_SECS,
                "--measurement-time",
                &measurement,
            ]
            .map(str::to_owned),
        );
        runs.push(run);
        for args in runs {
            eprintln!("==> cargo {}", args.join(" "));
            #[allow(
                clippy::disallowed_methods,
                reason = "not a test: builds and benches run in the foreground, holding no guard"
            )]
            // Criterion reports on stdout: that goes to stderr, so that stdout is the table.
            let ran = std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .and_then(|err| {
                    Command::new(&cargo)
                        .args(&args)
                        .current_dir(&root)
                        .stdout(err)
                        .status()
                });
            match ran {
                Ok(status) if status.success() => {}
                Ok(status) => {
                    eprintln!("xtask bench: cargo {} failed ({status})", args.join(" "));
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("xtask bench: cannot run cargo: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let dir = std::env::var_os("CRITERION_HOME")
        .map_or_else(|| crate::target_dir().join("criterion"), PathBuf::from);
    let tables = collect(&dir).and_then(|found| {
        let table = markdown_table(&found)?;
        Ok(format!("{table}\n{}", goals_table(&found)?))
    });
    match tables {
        Ok(tables) => {
            print!("{tables}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One bench's result as criterion left it: its id (`group/function[/parameter]`) and the
/// text of its `new/estimates.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Estimate {
    pub(crate) id: String,
    pub(crate) json: String,
}

/// Why the table could not be made.
#[derive(Debug)]
pub(crate) enum Error {
    /// A directory or file under the criterion directory could not be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An `estimates.json` has no numeric `median.point_estimate`.
    NoMedian { id: String },
    /// No bench result was found.
    Empty { dir: PathBuf },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Self::NoMedian { id } => {
                write!(
                    f,
                    "the estimates of {id} have no numeric median.point_estimate"
                )
            }
            Self::Empty { dir } => write!(
                f,
                "no bench results (*/new/estimates.json) under {}",
                dir.display()
            ),
        }
    }
}

/// The Markdown table of `estimates`, one row per bench sorted by id: `| group/bench | median |
/// unit |`, the median (criterion's point estimate, in nanoseconds) shown in the largest unit
/// of ns, µs, ms and s in which it is at least 1, to three significant figures.
pub(crate) fn markdown_table(estimates: &[Estimate]) -> Result<String, Error> {
    let mut rows = Vec::with_capacity(estimates.len());
    for estimate in estimates {
        let (value, unit) = scaled(median_of(estimate)?);
        rows.push((estimate.id.as_str(), value, unit));
    }
    rows.sort_by(|a, b| a.0.cmp(b.0));
    let mut table = String::from("| group/bench | median | unit |\n|---|---:|---|\n");
    for (id, value, unit) in rows {
        table.push_str(&format!("| `{id}` | {value} | {unit} |\n"));
    }
    Ok(table)
}

/// A goal of issue 38, as the benches measure it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Goal {
    /// `ours` takes at most `max` times `floor` (the same durable steps by hand, or the
    /// alternative a user would pick).
    Ratio {
        ours: &'static str,
        floor: &'static str,
        max: f64,
    },
    /// `ours` takes under `max_ns` nanoseconds.
    Under { ours: &'static str, max_ns: f64 },
}

/// Every goal the second table checks, each by the ids of the benches that measure it.
pub(crate) const GOALS: &[Goal] = &[
    Goal::Ratio {
        ours: "guard_acquire_release/disk/worklane_guard",
        floor: "guard_acquire_release/disk/raw_open_flock_close",
        max: 1.3,
    },
    Goal::Ratio {
        ours: "guard_acquire_release/tmpfs/worklane_guard",
        floor: "guard_acquire_release/tmpfs/raw_open_flock_close",
        max: 1.3,
    },
    Goal::Ratio {
        ours: "lease_acquire_release/disk/worklane_lease",
        floor: "lease_acquire_release/disk/raw_floor",
        max: 1.3,
    },
    Goal::Ratio {
        ours: "lease_acquire_release/tmpfs/worklane_lease",
        floor: "lease_acquire_release/tmpfs/raw_floor",
        max: 1.3,
    },
    Goal::Ratio {
        ours: "admission_take_release/disk/agent_slot_with_8_held",
        floor: "admission_take_release/disk/syscall_floor_with_8_held",
        max: 1.5,
    },
    Goal::Ratio {
        ours: "admission_take_release/tmpfs/agent_slot_with_8_held",
        floor: "admission_take_release/tmpfs/syscall_floor_with_8_held",
        max: 1.5,
    },
    Goal::Ratio {
        ours: "budget_take/disk/worklane_budget_take",
        floor: "budget_take/disk/syscall_floor",
        max: 1.5,
    },
    Goal::Ratio {
        ours: "budget_take/tmpfs/worklane_budget_take",
        floor: "budget_take/tmpfs/syscall_floor",
        max: 1.5,
    },
    Goal::Ratio {
        ours: "cli_per_run/worklane_dist_run_true",
        floor: "cli_per_run/flock_n_file_true",
        max: 1.1,
    },
    Goal::Ratio {
        ours: "line_take_release/100_waiting",
        floor: "admission_take_release/tmpfs/agent_slot_with_8_held",
        max: 1.5,
    },
    Goal::Ratio {
        ours: "line_take_release/1000_waiting",
        floor: "admission_take_release/tmpfs/agent_slot_with_8_held",
        max: 2.0,
    },
    Goal::Under {
        ours: "views_1000_holders_1000_waiting/slots_document",
        max_ns: 50e6,
    },
    Goal::Under {
        ours: "views_1000_holders_1000_waiting/metrics_exposition",
        max_ns: 50e6,
    },
    Goal::Under {
        ours: "views_1000_holders_1000_waiting/why_admission",
        max_ns: 50e6,
    },
    Goal::Under {
        ours: "dispatcher_recovery_10000_rows/disk/cold",
        max_ns: 1e9,
    },
];

/// The second table: each of [`GOALS`] with what this run measured, `| worklane | against |
/// ratio | goal | met |`; a goal whose benches are not among `estimates` says so (`not
/// measured`), so that a partial run never reads as a pass.
pub(crate) fn goals_table(estimates: &[Estimate]) -> Result<String, Error> {
    let median = |id: &str| -> Result<Option<f64>, Error> {
        let Some(estimate) = estimates.iter().find(|e| e.id == id) else {
            return Ok(None);
        };
        median_of(estimate).map(Some)
    };
    let shown = |ns: f64| {
        let (value, unit) = scaled(ns);
        format!("{value} {unit}")
    };
    let mut table =
        String::from("| worklane | against | ratio | goal | met |\n|---|---|---:|---:|---|\n");
    for goal in GOALS {
        let row = match *goal {
            Goal::Ratio { ours, floor, max } => match (median(ours)?, median(floor)?) {
                (Some(a), Some(b)) if b > 0.0 => format!(
                    "| `{ours}` {} | `{floor}` {} | {:.2}x | <= {max}x | {} |",
                    shown(a),
                    shown(b),
                    a / b,
                    if a / b <= max { "yes" } else { "no" }
                ),
                _ => format!("| `{ours}` | `{floor}` | not measured | <= {max}x | |"),
            },
            Goal::Under { ours, max_ns } => match median(ours)? {
                Some(a) => format!(
                    "| `{ours}` {} | | | < {} | {} |",
                    shown(a),
                    shown(max_ns),
                    if a < max_ns { "yes" } else { "no" }
                ),
                None => format!("| `{ours}` | | not measured | < {} | |", shown(max_ns)),
            },
        };
        table.push_str(&row);
        table.push('\n');
    }
    Ok(table)
}

/// The median of `estimate` (criterion's point estimate, in nanoseconds).
fn median_of(estimate: &Estimate) -> Result<f64, Error> {
    serde_json::from_str::<serde_json::Value>(&estimate.json)
        .ok()
        .and_then(|v| v["median"]["point_estimate"].as_f64())
        .filter(|ns| ns.is_finite() && *ns >= 0.0)
        .ok_or_else(|| Error::NoMedian {
            id: estimate.id.clone(),
        })
}

/// `ns` nanoseconds as a number of three significant figures and its unit.
fn scaled(ns: f64) -> (String, &'static str) {
    let (value, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    let text = if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    (text, unit)
}

/// Every bench result under `dir` (criterion's output directory): each `new/estimates.json`,
/// named by the `full_id` of the `new/benchmark.json` beside it, or else by its path below
/// `dir`. Criterion's own `report` directories are not results.
pub(crate) fn collect(dir: &Path) -> Result<Vec<Estimate>, Error> {
    let mut found = Vec::new();
    walk(dir, dir, &mut found)?;
    if found.is_empty() {
        return Err(Error::Empty {
            dir: dir.to_owned(),
        });
    }
    Ok(found)
}

fn walk(root: &Path, dir: &Path, found: &mut Vec<Estimate>) -> Result<(), Error> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })
    };
    let estimates = dir.join("new").join("estimates.json");
    if estimates.is_file() {
        let id = std::fs::read_to_string(dir.join("new").join("benchmark.json"))
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|v| v["full_id"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                dir.strip_prefix(root)
                    .unwrap_or(dir)
                    .to_string_lossy()
                    .into_owned()
            });
        found.push(Estimate {
            id,
            json: read(&estimates)?,
        });
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.to_owned(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::Read {
            path: dir.to_owned(),
            source,
        })?;
        let name = entry.file_name();
        if name == "report" || name == "new" || name == "base" || name == "change" {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(root, &entry.path(), found)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Error, Estimate, collect, goals_table, markdown_table};

    fn estimates(median_ns: f64) -> String {
        format!(
            r#"{{"mean":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0}},"point_estimate":999999.0,"standard_error":1.0}},"median":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0}},"point_estimate":{median_ns},"standard_error":1.0}}}}"#
        )
    }

    #[test]
    fn each_goal_is_its_ratio_or_bound_met_or_not_and_a_missing_bench_is_not_measured() {
        let one = |id: &str, ns: f64| Estimate {
            id: id.into(),
            json: estimates(ns),
        };
        let table = goals_table(&[
            one("guard_acquire_release/disk/worklane_guard", 3_000.0),
            one("guard_acquire_release/disk/raw_open_flock_close", 2_500.0),
            one("guard_acquire_release/tmpfs/worklane_guard", 4_000.0),
            one("guard_acquire_release/tmpfs/raw_open_flock_close", 2_000.0),
            one(
                "views_1000_holders_1000_waiting/slots_document",
                49_000_000.0,
            ),
            one(
                "views_1000_holders_1000_waiting/why_admission",
                50_000_000.0,
            ),
            one("lease_acquire_release/disk/worklane_lease", 1_300.0),
            one("lease_acquire_release/disk/raw_floor", 1_000.0),
        ])
        .expect("a table");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "| worklane | against | ratio | goal | met |");
        assert_eq!(
            lines[2],
            "| `guard_acquire_release/disk/worklane_guard` 3.00 µs | \
             `guard_acquire_release/disk/raw_open_flock_close` 2.50 µs | 1.20x | <= 1.3x | yes |"
        );
        assert_eq!(
            lines[3],
            "| `guard_acquire_release/tmpfs/worklane_guard` 4.00 µs | \
             `guard_acquire_release/tmpfs/raw_open_flock_close` 2.00 µs | 2.00x | <= 1.3x | no |"
        );
        assert!(
            lines[4].ends_with("| 1.30x | <= 1.3x | yes |"),
            "the bound itself is met: {}",
            lines[4]
        );
        assert_eq!(
            lines[5],
            "| `lease_acquire_release/tmpfs/worklane_lease` | \
             `lease_acquire_release/tmpfs/raw_floor` | not measured | <= 1.3x | |"
        );
        let under = |id: &str| {
            *lines
                .iter()
                .find(|l| l.starts_with(&format!("| `{id}`")))
                .expect(id)
        };
        assert_eq!(
            under("views_1000_holders_1000_waiting/slots_document"),
            "| `views_1000_holders_1000_waiting/slots_document` 49.0 ms | | | < 50.0 ms | yes |"
        );
        assert!(
            under("views_1000_holders_1000_waiting/why_admission").ends_with("| < 50.0 ms | no |"),
            "under means under"
        );
        assert!(
            under("views_1000_holders_1000_waiting/metrics_exposition").contains("not measured")
        );
        assert_eq!(lines.len(), 2 + super::GOALS.len());
        assert!(matches!(
            goals_table(&[Estimate {
                id: "guard_acquire_release/disk/worklane_guard".into(),
                json: "{}".into(),
            }]),
            Err(Error::NoMedian { .. })
        ));
    }

    #[test]
    fn every_bench_but_fleet_is_run() {
        let dir = crate::workspace_root().join("benches/benches");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("benches/benches")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter_map(|name| name.strip_suffix(".rs").map(str::to_owned))
            .filter(|name| name != "fleet")
            .collect();
        files.sort();
        let mut run: Vec<String> = super::BENCHES.iter().map(|b| (*b).to_owned()).collect();
        run.sort();
        assert_eq!(run, files, "BENCHES names every bench file but fleet's");
    }

    #[test]
    fn the_table_shows_each_median_in_its_unit_sorted_by_id() {
        let table = markdown_table(&[
            Estimate {
                id: "lease_acquire_release/disk/worklane_lease".into(),
                json: estimates(28_213.4),
            },
            Estimate {
                id: "guard_acquire_release/tmpfs/raw_open_flock_close".into(),
                json: estimates(812.0),
            },
            Estimate {
                id: "dispatcher_recovery_10000_rows/disk".into(),
                json: estimates(1_061_000_000.0),
            },
            Estimate {
                id: "line_handoff_gap/line".into(),
                json: estimates(583_000.0),
            },
        ])
        .expect("a table");
        assert_eq!(
            table,
            "| group/bench | median | unit |\n\
             |---|---:|---|\n\
             | `dispatcher_recovery_10000_rows/disk` | 1.06 | s |\n\
             | `guard_acquire_release/tmpfs/raw_open_flock_close` | 812 | ns |\n\
             | `lease_acquire_release/disk/worklane_lease` | 28.2 | µs |\n\
             | `line_handoff_gap/line` | 583 | µs |\n",
            "the median (not the mean), three significant figures, sorted by id"
        );
    }

    #[test]
    fn estimates_without_a_median_name_their_bench() {
        let err = markdown_table(&[Estimate {
            id: "budget_take/disk/worklane_budget_take".into(),
            json: r#"{"mean":{"point_estimate":1.0}}"#.into(),
        }])
        .expect_err("no median");
        assert!(
            matches!(&err, Error::NoMedian { id } if id == "budget_take/disk/worklane_budget_take"),
            "the error names the bench: {err}"
        );
    }

    #[test]
    fn results_are_found_in_a_criterion_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let put = |rel: &str, text: &str| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        // A function with a benchmark.json naming it, one without (named by its path), a
        // parameterised one three levels down, and criterion's own report and base copies.
        put(
            "guard_acquire_release_disk/worklane_guard/new/estimates.json",
            &estimates(1500.0),
        );
        put(
            "guard_acquire_release_disk/worklane_guard/new/benchmark.json",
            r#"{"full_id":"guard_acquire_release/disk/worklane_guard"}"#,
        );
        put(
            "guard_acquire_release_disk/worklane_guard/base/estimates.json",
            &estimates(1.0),
        );
        put(
            "identity_probe_live_pid/kill_pid_0_only/new/estimates.json",
            &estimates(90.0),
        );
        put(
            "dispatcher_next_row/1000/new/estimates.json",
            &estimates(2_500.0),
        );
        put("report/index.html", "<html></html>");
        let mut found = collect(root).expect("results");
        found.sort_by(|a, b| a.id.cmp(&b.id));
        let ids: Vec<&str> = found.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "dispatcher_next_row/1000",
                "guard_acquire_release/disk/worklane_guard",
                "identity_probe_live_pid/kill_pid_0_only",
            ],
            "one result per new/estimates.json, named by benchmark.json's full_id when there is one"
        );
        let table = markdown_table(&found).expect("a table");
        assert!(
            table.contains("| `guard_acquire_release/disk/worklane_guard` | 1.50 | µs |"),
            "the new estimates, not the base ones: {table}"
        );
    }

    #[test]
    fn an_empty_criterion_directory_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(
            matches!(collect(dir.path()), Err(Error::Empty { .. })),
            "no results: nothing to tabulate"
        );
    }
}
