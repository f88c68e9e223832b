//! The budgets' health view for people, as `budget show` and `slots` print it (the view and
//! its JSON are `worklane_view::budget`).

use crate::exit::Failure;
use crate::out::outln;
use worklane_budget::CredentialView;
use worklane_lease::rfc3339_ms;

/// The health view for people, one block per credential.
pub(crate) fn print_views(views: &[CredentialView]) -> Result<(), Failure> {
    if views.is_empty() {
        outln!("API budgets: none recorded")?;
        return Ok(());
    }
    for v in views {
        outln!(
            "API budget of credential #{} with {} (updated {})",
            v.number,
            v.provider,
            rfc3339_ms(v.updated_ms)
        )?;
        if let Some(until) = v.paused_until {
            let why = if v.provider == "github" {
                "secondary rate limit"
            } else {
                "the provider's 429"
            };
            outln!("  paused until {} ({why})", rfc3339_ms(until))?;
        }
        if v.in_flight > 0 || v.waiting > 0 {
            outln!(
                "  {} call(s) in flight, {} waiting in a proxy",
                v.in_flight,
                v.waiting
            )?;
        }
        for r in &v.resources {
            let limit = r.limit.map_or_else(String::new, |l| format!(" of {l}"));
            let consumers = r
                .by_consumer
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let seen = if r.assumed {
                // Carried over: no response has reported this window yet.
                format!(
                    "assumed: the limit carried over, {} granted since",
                    r.granted
                )
            } else {
                format!(
                    "remaining {} when seen, {} granted since",
                    r.remaining, r.granted
                )
            };
            let in_flight = if r.in_flight > 0 {
                format!(", {} in flight", r.in_flight)
            } else {
                String::new()
            };
            outln!(
                "  {:<10} {} left{limit} ({seen}{in_flight}); resets {}{}",
                r.name,
                r.left,
                rfc3339_ms(r.reset_at),
                if consumers.is_empty() {
                    String::new()
                } else {
                    format!("; this window: {consumers}")
                }
            )?;
        }
    }
    Ok(())
}
