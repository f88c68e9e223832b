//! `worklane top` (feature `top`): the machine live in a terminal, drawn with ratatui on
//! crossterm. The state is the document `slots --json` prints, read again at each change; a
//! change is a new line in the event journal, which every change writes, followed on inotify
//! by a thread of its own. `q` (or Esc, Ctrl-C) quits and gives the terminal back as it was.

use crate::exit::{self, Failure};
use crate::json;
use ratatui::crossterm::event::{self, Event as Input, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use worklane_journal::{Entry, Follow};
use worklane_view::context::Around;

/// How many of the last events are kept for the view.
const LAST_EVENTS: usize = 50;

/// What the view shows: `slots --json`'s document and the last events.
struct View {
    doc: json::Slots,
    events: Vec<Entry>,
    color: bool,
}

fn style(color: bool, fg: Color) -> Style {
    match color {
        true => Style::default().fg(fg).add_modifier(Modifier::BOLD),
        false => Style::default().add_modifier(Modifier::BOLD),
    }
}

/// Seconds since an RFC 3339 time, as `1m05s`; `-` when it is not one.
fn age(since: Option<&str>, now_ms: i64) -> String {
    let Some(ms) = since.and_then(worklane_journal::ms_of_time) else {
        return "-".to_owned();
    };
    let s = (now_ms - ms).max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn draw(frame: &mut ratatui::Frame<'_>, view: &View) {
    let doc = &view.doc;
    let now = now_ms();
    let banner = match (&doc.stop, &doc.drain) {
        (Some(stop), _) => Some((
            format!("STOP by {} at {}: {}", stop.by, stop.at, stop.reason),
            Color::Red,
        )),
        (None, json::Drain::InForce(d)) => {
            Some((format!("DRAIN until {}", d.until), Color::Yellow))
        }
        _ => None,
    };
    let live_waiters = doc.line.iter().filter(|w| w.live).count();
    // The line as tall as it needs (every waiter that fits), the held slots and the events
    // keep their least.
    let line_rows = u16::try_from(live_waiters.max(1)).unwrap_or(u16::MAX);
    let [head, holders, line, rows, events] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(4),
        Constraint::Length(line_rows.saturating_add(2)),
        Constraint::Length(4),
        Constraint::Min(4),
    ])
    .areas(frame.area());
    let mut top = vec![Line::from(format!(
        "worklane top  agents {} of {}  tests {} of {}  build jobs {} of {}  full run {}",
        doc.agents_held,
        doc.max_agents,
        doc.test_runs_held,
        doc.max_test_runs,
        doc.jobs_held,
        doc.max_jobs,
        if doc.full_run_held { "running" } else { "none" }
    ))];
    top.push(match banner {
        Some((text, color)) => Line::styled(text, style(view.color, color)),
        None => Line::from("STOP: none  drain: none  (q quits)"),
    });
    frame.render_widget(Paragraph::new(top), head);

    let held: Vec<Row<'_>> = doc
        .slots
        .iter()
        .filter(|s| s.counts)
        .map(|s| {
            let pulse = match s.kind {
                "role" => format!("pulse {}", age(s.last_pulse.as_deref(), now)),
                _ => String::new(),
            };
            // The run's CPU time and processes, from its cgroup (containment on).
            let cpu = s.cgroup.as_ref().map_or_else(
                || "-".to_owned(),
                |c| {
                    c.cpu_usec.map_or_else(
                        || format!("{}p", c.procs.len()),
                        |us| format!("{:.1}s {}p", us as f64 / 1e6, c.procs.len()),
                    )
                },
            );
            Row::new(vec![
                s.name.clone(),
                s.kind.to_owned(),
                s.pid.map_or("-".to_owned(), |p| p.to_string()),
                s.owner.clone().unwrap_or_else(|| "-".to_owned()),
                age(s.since.as_deref(), now),
                cpu,
                pulse,
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(22),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(16),
        Constraint::Length(8),
        Constraint::Length(11),
        Constraint::Min(10),
    ];
    frame.render_widget(
        Table::new(held, widths)
            .header(Row::new([
                "holder", "kind", "pid", "owner", "age", "cpu", "",
            ]))
            .block(Block::bordered().title("held")),
        holders,
    );
    let mut waiting: Vec<String> = doc
        .line
        .iter()
        .filter(|w| w.live)
        .map(|w| {
            format!(
                "{}. {} {} (pid {}) waiting {}",
                w.position.unwrap_or(0),
                w.kind,
                w.owner.as_deref().unwrap_or("-"),
                w.pid.map_or("-".to_owned(), |p| p.to_string()),
                age(Some(&w.start), now)
            )
        })
        .collect();
    // As many as fit, and how many more there are.
    let room = usize::from(line.height.saturating_sub(2));
    if waiting.len() > room {
        let more = waiting.len() - room.saturating_sub(1);
        waiting.truncate(room.saturating_sub(1));
        waiting.push(format!("+{more} more"));
    }
    frame.render_widget(
        Paragraph::new(waiting.join("\n")).block(Block::bordered().title("line")),
        line,
    );
    let mut more: Vec<String> = doc
        .queue
        .attempts
        .iter()
        .map(|a| {
            format!(
                "{} lane {} {}",
                a["attempt"].as_str().unwrap_or("-"),
                a["lane"].as_str().unwrap_or("-"),
                a["state"].as_str().unwrap_or("-")
            )
        })
        .collect();
    more.extend(doc.budgets.iter().map(|b| {
        let left: Vec<String> = b
            .resources
            .iter()
            .map(|r| format!("{} {} left", r.name, r.left))
            .collect();
        let paused = b
            .paused_until
            .as_deref()
            .map_or(String::new(), |u| format!(", paused until {u}"));
        let busy = if b.in_flight > 0 || b.waiting > 0 {
            format!(", {} in flight, {} waiting", b.in_flight, b.waiting)
        } else {
            String::new()
        };
        format!(
            "{} credential {}: {}{paused}{busy}",
            b.provider,
            b.credential,
            left.join(", ")
        )
    }));
    frame.render_widget(
        Paragraph::new(more.join("\n")).block(Block::bordered().title("dispatcher and budgets")),
        rows,
    );
    let shown = usize::from(events.height.saturating_sub(2));
    let last: Vec<String> = view
        .events
        .iter()
        .rev()
        .take(shown)
        .rev()
        .map(|e| {
            format!(
                "{} {} {}",
                e.at.get(11..19).unwrap_or(&e.at),
                e.event.kind(),
                e.event.what()
            )
        })
        .collect();
    frame.render_widget(
        Paragraph::new(last.join("\n")).block(Block::bordered().title("last events")),
        events,
    );
}

/// `slots --json`'s document now.
fn document(pool: &worklane_admission::Pool) -> Result<json::Slots, Failure> {
    let snapshot = pool.snapshot_retiring()?;
    let around = Around::of(pool, &snapshot);
    Ok(worklane_view::slots::to_json(&snapshot, &around))
}

fn failed(what: &str, e: &std::io::Error) -> Failure {
    Failure::new(exit::OS_ERROR, format!("top: cannot {what}: {e}"))
}

pub(crate) fn top() -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let (follow, history) =
        Follow::start(pool.dir()).map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    // The journal's new lines, from a thread that waits for them on inotify.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut follow = follow;
        while let Ok(batch) = follow.next(None) {
            if tx.send(batch.entries).is_err() {
                break;
            }
        }
    });
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let mut view = View {
        doc: document(&pool)?,
        events: history
            .entries
            .into_iter()
            .filter(|e| e.event.kind() != "totals")
            .collect(),
        color,
    };
    let mut terminal = ratatui::try_init().map_err(|e| failed("use the terminal", &e))?;
    let outcome = (|| -> Result<(), Failure> {
        let mut drawn = Instant::now();
        loop {
            let keep = view.events.len().saturating_sub(LAST_EVENTS);
            view.events.drain(..keep);
            terminal
                .draw(|frame| draw(frame, &view))
                .map_err(|e| failed("draw", &e))?;
            // Keys are looked at every 50 ms; a change redraws within that, and the ages
            // move once a second.
            loop {
                if event::poll(Duration::from_millis(50)).map_err(|e| failed("read keys", &e))? {
                    match event::read().map_err(|e| failed("read keys", &e))? {
                        Input::Key(key) if key.kind == KeyEventKind::Press => {
                            let ctrl_c = key.code == KeyCode::Char('c')
                                && key.modifiers.contains(KeyModifiers::CONTROL);
                            if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                                return Ok(());
                            }
                        }
                        // Drawn again at once for the new size, not at the next tick.
                        Input::Resize(..) => break,
                        _ => {}
                    }
                }
                let mut changed = false;
                while let Ok(entries) = rx.try_recv() {
                    // A rotation's carried totals are no event to show.
                    view.events
                        .extend(entries.into_iter().filter(|e| e.event.kind() != "totals"));
                    changed = true;
                }
                if changed || drawn.elapsed() >= Duration::from_secs(1) {
                    break;
                }
            }
            view.doc = document(&pool)?;
            drawn = Instant::now();
        }
    })();
    ratatui::restore();
    outcome.map(|()| ExitCode::SUCCESS)
}
