//! `worklane metrics`: the exposition `worklane_view::metrics` builds, printed on stdout,
//! written atomically to a file for node_exporter's textfile collector (`--textfile`), or
//! served over HTTP (`--listen`), as `worklane_view::metrics::serve` does both.

use crate::cli::MetricsArgs;
use crate::exit::{self, Failure};
use crate::out::errln;
use std::process::ExitCode;
use worklane_view::metrics::serve;

fn exposition(pool: &worklane_admission::Pool) -> Result<String, Failure> {
    use worklane_view::metrics::Error as E;
    worklane_view::metrics::exposition(pool).map_err(|e| match e {
        E::Look(e) => Failure::from(e),
        e => Failure::new(exit::OS_ERROR, exit::chain(&e)),
    })
}

fn failed(option: &str, e: &serve::Error) -> Failure {
    let code = match e {
        serve::Error::NoFileName { .. } => exit::USAGE,
        _ => exit::OS_ERROR,
    };
    Failure::new(code, format!("metrics {option}: {}", exit::chain(e)))
}

pub(crate) fn metrics(args: &MetricsArgs) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    if let Some(path) = &args.textfile {
        serve::write_textfile(path, &exposition(&pool)?).map_err(|e| failed("--textfile", &e))?;
    } else if let Some(addr) = &args.listen {
        let listener = serve::bind(addr).map_err(|e| failed("--listen", &e))?;
        let bound = listener
            .local_addr()
            .map_or_else(|_| serve::address(addr), |a| a.to_string());
        errln!("worklane: serving http://{bound}/metrics");
        serve::serve(&listener, &|| exposition(&pool).map_err(|f| f.message));
    } else {
        crate::out::bytes(exposition(&pool)?.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
