//! The JSON documents the CLI prints, one `#[derive(Serialize)]` type per document (and per
//! nested object), so that a document's shape is read here and nowhere else. The schema, with
//! an example of each document, is `docs/json.md`; a CLI test checks every example there
//! against the real output of its command.
//!
//! Two documents have their types beside the code that fills them: the `lease run --json`
//! refusal (`role.rs`) and the `--status-fd` events (`status.rs`); `events --json` prints the
//! journal's own lines, `worklane_journal::Entry`, whose schema that crate owns. Every document that is an
//! object carries `version` ([`VERSION`]) first. One output is not an object and stays as it
//! has always been: `config get KEY --json`, the key's bare value. A view's document carries
//! `config_problem` ([`ConfigProblem`], null when the config is good) and its `problems`.

use serde::Serialize;

mod budget;
mod operator;
mod queue;

pub(crate) use budget::*;
pub(crate) use operator::*;
pub(crate) use queue::*;
pub(crate) use worklane_view::doc::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variants_keep_their_shapes() {
        let take = Take {
            version: VERSION,
            answer: TakeAnswer::Go {
                go: True,
                counted: true,
                left: Some(3),
                unaccounted: None,
                reservation: None,
            },
        };
        assert_eq!(
            line(&take),
            r#"{"version":1,"go":true,"counted":true,"left":3,"unaccounted":null}"#
        );
        let nowhere = Reconciled {
            version: VERSION,
            attempt: "a-1",
            holder: Holder::Nowhere { holder: Nobody },
        };
        assert_eq!(
            line(&nowhere),
            r#"{"version":1,"attempt":"a-1","holder":null}"#
        );
        assert_eq!(
            line(&Drain::InForce(DrainFlag {
                since: "s".into(),
                until: "u".into(),
                to: None
            })),
            r#"{"state":"in-force","since":"s","until":"u","to":null}"#
        );
        assert_eq!(line(&Drain::None), r#"{"state":"none"}"#);
        let list = QueueList {
            version: VERSION,
            full_runs: Vec::new(),
            dispatcher: DispatcherList::none("none".into()),
            problems: Vec::new(),
            config_problem: None,
        };
        assert_eq!(
            line(&list),
            r#"{"version":1,"full_runs":[],"dispatcher_pid":null,"attempts":[],"logs":[],"dispatcher":"none","problems":[],"config_problem":null}"#
        );
    }
}
