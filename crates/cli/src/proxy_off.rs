//! `worklane proxy` in a worklane built without its `proxy` feature (no HTTP stack): it says
//! so and exits 69.

use crate::cli::ProxyArgs;
use crate::exit::{self, Failure};
use std::process::ExitCode;

pub(crate) fn proxy(_args: &ProxyArgs) -> Result<ExitCode, Failure> {
    Err(Failure::new(
        exit::UNAVAILABLE,
        "this worklane was built without the proxy (cargo feature `proxy`: hyper, tokio and \
         rustls); rebuild it with `cargo install --path crates/cli --features proxy`",
    ))
}
