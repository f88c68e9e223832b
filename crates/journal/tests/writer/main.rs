//! `journal-writer`: appends events to the journal of a slot directory, as a separate process
//! the tests can SIGKILL, run many of at once, or run as another user.
//!
//! `journal-writer DIR COUNT [MAX_BYTES]`: appends COUNT `slot-taken` events (`epoch` counting
//! from 0, `owner` this process's tag from `WRITER_TAG`, a long `slot` to fill lines), then
//! prints the number it could not append (`dropped`) and exits 0. With `WRITER_ROUND=K` it
//! reads a line from stdin before each K lines (a test's pace: the next round when it says).

#![allow(clippy::print_stdout, reason = "a test helper reports on stdout")]

use worklane_journal::{Event, Journal};
use worklane_slotfile::SlotDir;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("DIR");
    let count: u64 = args.next().expect("COUNT").parse().expect("a count");
    let max: Option<u64> = args.next().map(|m| m.parse().expect("bytes"));
    let tag = std::env::var("WRITER_TAG").unwrap_or_else(|_| "w".to_owned());
    let dir = SlotDir::open(std::path::Path::new(&dir)).expect("open the slot directory");
    let journal = Journal::of(&dir);
    if let Some(max) = max {
        journal.set_max_bytes(max);
    }
    let round: Option<u64> = std::env::var("WRITER_ROUND")
        .ok()
        .map(|k| k.parse().expect("a round"));
    for epoch in 0..count {
        if let Some(k) = round
            && epoch % k == 0
        {
            let mut go = String::new();
            let _ = std::io::stdin().read_line(&mut go);
        }
        journal.emit(Event::SlotTaken {
            slot: format!("agent-{epoch}.lock{}", ".".repeat(200)),
            slot_kind: "agent".to_owned(),
            owner: tag.clone(),
            epoch,
            waited_ms: 0,
        });
    }
    println!("{}", journal.dropped());
}
