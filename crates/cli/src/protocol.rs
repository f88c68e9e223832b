//! `worklane protocol`: the slot directory's protocol level and extensions (`protocol.json`),
//! what this worklane keeps, and dropping an extension nothing uses.

use crate::exit::{self, Failure};
use crate::out::{outln, sayln};
use std::process::ExitCode;
use worklane_admission::Dropped;
use worklane_admission::protocol::{self, KNOWN, LEVEL};

pub(crate) fn command(command: crate::cli::ProtocolCommand) -> Result<ExitCode, Failure> {
    match command {
        crate::cli::ProtocolCommand::Show { json } => show(json),
        crate::cli::ProtocolCommand::Drop { extension } => drop_extension(&extension),
    }
}

fn show(as_json: bool) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    let read = protocol::read(pool.dir());
    let refused = read
        .as_ref()
        .map_err(Clone::clone)
        .and_then(protocol::check)
        .err()
        .map(|why| why.to_string());
    let found = read.unwrap_or_default();
    if as_json {
        let doc = serde_json::json!({
            "version": 1,
            "level": found.level,
            "extensions": found.extensions,
            "keeps": {"level": LEVEL, "extensions": KNOWN},
            "refused": refused,
        });
        outln!("{doc}")?;
        return Ok(ExitCode::SUCCESS);
    }
    let extensions = match found.extensions.is_empty() {
        true => "none".to_owned(),
        false => found.extensions.join(", "),
    };
    outln!(
        "{}: protocol level {}, extensions: {extensions}",
        pool.dir().path().join(protocol::PROTOCOL_FILE).display(),
        found.level
    )?;
    outln!(
        "this worklane keeps level {LEVEL} with the extensions {}",
        KNOWN.join(", ")
    )?;
    if let Some(refused) = refused {
        outln!("refused here: {refused}")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn drop_extension(extension: &str) -> Result<ExitCode, Failure> {
    let pool = crate::pool()?;
    match pool.drop_extension(extension)? {
        Dropped::Dropped => {
            sayln!(
                "{extension} removed from protocol.json: nothing uses it; implementations that \
                 do not know it may take slots here again"
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Dropped::NotNamed => {
            sayln!("{extension} was not in protocol.json")?;
            Ok(ExitCode::SUCCESS)
        }
        Dropped::InUse(users) => Err(Failure::new(
            exit::TEMP_FAIL,
            format!(
                "{extension} is still in use, so it stays in protocol.json: {}; end those \
                 (and `worklane config unset shares`) first",
                users.join(", ")
            ),
        )),
    }
}
