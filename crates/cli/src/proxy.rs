//! `worklane proxy`: a model provider's API served on this machine by `worklane-proxy`, every
//! request taken from the shared budget first. SIGTERM and SIGINT start its drain.

use crate::cli::ProxyArgs;
use crate::exit::{self, Failure};
use crate::out::errln;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use worklane_proxy::{Config, Listen, Proxy, Upstream};

pub(crate) fn proxy(args: &ProxyArgs) -> Result<ExitCode, Failure> {
    let provider = crate::shared::budget::provider(&args.provider)?;
    if provider.profile().is_none() {
        // Said before anything else: no --upstream makes GitHub's budget a proxy's.
        return Err(Failure::new(
            exit::USAGE,
            exit::chain(&worklane_proxy::bind::Error::Github),
        ));
    }
    let upstream = match &args.upstream {
        Some(url) => url.parse::<Upstream>().map_err(|e| {
            Failure::new(
                exit::USAGE,
                format!("--upstream {url}: {}", exit::chain(&e)),
            )
        })?,
        None => Upstream::of(&provider).ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                format!(
                    "--provider {}: name its API with --upstream URL",
                    args.provider
                ),
            )
        })?,
    };
    let listen = args.listen.parse::<Listen>().map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!("--listen {}: {}", args.listen, exit::chain(&e)),
        )
    })?;
    let config = Config {
        max_wait: args.max_wait,
        drain: args.drain,
        ..Config::new(provider, upstream, listen)
    };
    let proxy = Proxy::bind(config).map_err(|e| {
        use worklane_proxy::bind::Error as E;
        let code = match &e {
            E::Github => exit::USAGE,
            E::SlotDir { .. } | E::NotASocket { .. } | E::DirOwner { .. } => exit::CONFIG,
            E::Tcp { .. } | E::Unix { .. } | E::InUse { .. } => exit::UNAVAILABLE,
            _ => exit::OS_ERROR,
        };
        Failure::new(code, exit::chain(&e))
    })?;
    let trigger = proxy.trigger();
    // SIGTERM or SIGINT: stop accepting, let what is in flight finish within --drain.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        worklane_run::process::on_flag(signal, Arc::clone(&stop)).map_err(|e| {
            Failure::new(
                exit::OS_ERROR,
                format!("cannot install a handler for signal {signal}: {e}"),
            )
        })?;
    }
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        trigger.fire();
    });
    errln!(
        "worklane: proxy for {} listening on {} (budget shared machine-wide)",
        args.provider,
        proxy.local_addr()
    );
    let served = proxy
        .run(std::future::pending())
        .map_err(|e| Failure::new(exit::OS_ERROR, exit::chain(&e)))?;
    if served.cut > 0 {
        errln!(
            "worklane: proxy stopped; {} connection(s) still busy after the drain were cut",
            served.cut
        );
    }
    Ok(ExitCode::SUCCESS)
}
