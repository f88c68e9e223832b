//! `worklane top` in a worklane built without its `top` feature (no terminal library): it
//! says so and exits 69.

use crate::exit::{self, Failure};
use std::process::ExitCode;

pub(crate) fn top() -> Result<ExitCode, Failure> {
    Err(Failure::new(
        exit::UNAVAILABLE,
        "this worklane was built without `top` (cargo feature `top`: ratatui and crossterm); \
         rebuild it with `--features top`, or follow `worklane events --follow`",
    ))
}
