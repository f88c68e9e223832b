//! `worklane budget show | take | observe`: the per-credential API budget from the command
//! line, so a harness in any language shares the machine's budget.

use crate::exit::{self, Failure};
use crate::json;
use crate::out::outln;
use crate::shared::budget::ledger;
use crate::shared::budget_text::print_views;
use std::process::ExitCode;
use worklane_view::budget::{unshown_problems, views_json};

mod answer;
mod providers;
mod take;

pub(crate) use providers::release;
pub(crate) use take::{observe, take};

/// At most `max` bytes of the file `path`, or of stdin for `-`: a saved response's headers or
/// body, which `budget observe` reads.
fn read_input(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut raw = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin().lock().take(max).read_to_end(&mut raw)?;
    } else {
        std::fs::File::open(path)?.take(max).read_to_end(&mut raw)?;
    }
    Ok(raw)
}

pub(crate) fn show(as_json: bool, fleet: &crate::cli::FleetAt) -> Result<ExitCode, Failure> {
    let health = if fleet.endpoints.is_empty() {
        let ledger = ledger("worklane")?;
        let dir = ledger.dir().path().to_owned();
        let health = ledger
            .health_report()
            .map_err(|e| Failure::new(exit::CONFIG, exit::chain(&e)))?;
        let problems = unshown_problems(&dir, &health.unshown);
        (health.views, problems)
    } else {
        (crate::fleet::budget_views(fleet)?, Vec::new())
    };
    let (views, problems) = health;
    let config = worklane_view::config_problem::Problem::now();
    if as_json {
        outln!(
            "{}",
            json::pretty(&json::BudgetShow {
                version: json::VERSION,
                budgets: views_json(&views),
                problems,
                config_problem: config
                    .as_ref()
                    .map(worklane_view::config_problem::Problem::json),
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(problem) = &config {
        outln!("{}", problem.line())?;
    }
    print_views(&views)?;
    let lines = crate::json::problem_lines(&problems);
    if !lines.is_empty() {
        outln!("budget states left out ({}):", lines.len())?;
        for line in &lines {
            outln!("  {line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
