//! Takeover claims: their names, and clearing the ones that cannot stand.

use crate::clock::Now;
use crate::error::Failure;
use crate::liveness::{Judgement, LiveWhy};
use crate::options::Options;
use crate::read::read_hostile;
use crate::record::Record;
use crate::refusal::Refusal;
use sha2::{Digest, Sha256};
use worklane_slotfile::SlotPath;

/// The claim file name for a stale record: `<lock>.<first 16 hex of SHA-256(record)>.claim`.
#[must_use]
pub fn claim_name(lock: &str, stale_record: &[u8]) -> String {
    let digest = Sha256::digest(stale_record);
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{lock}.{hex}.claim")
}

pub(crate) fn is_claim_of(lock: &str, name: &str) -> bool {
    name.strip_prefix(lock)
        .and_then(|rest| rest.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(".claim"))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Clears every takeover claim on `path` that cannot stand for a taker still at work, and
/// refuses us if one may. Called with the guard held, so every claim found belongs to a taker
/// that no longer holds it. A claim is cleared when:
/// - it is not a record at all (claims are published whole, so garbage is never a taker's);
/// - its name is not the hash of the record now at `path` (`record`, absent: `None`): it was
///   made for a record that is gone, so no taker of the current record made it;
/// - it declares that its taker held the guard (every worklane taker does), or the liveness
///   judges its taker dead.
///
/// A claim that is not a regular file of at most 64 KiB is never a taker's: it is unlinked
/// (a FIFO, a symbolic link, an oversized file), or skipped when it cannot be (a directory);
/// `worklane slots` reports it, and a takeover whose own claim name it occupies goes on
/// without a claim.
pub(crate) fn clear_claims(
    path: &SlotPath,
    listed: &[SlotPath],
    record: Option<&[u8]>,
    options: &Options,
) -> Result<Option<Refusal>, Failure> {
    let current = record.map(|raw| claim_name(path.name(), raw));
    for claim in listed.iter().filter(|p| is_claim_of(path.name(), p.name())) {
        let raw = match read_hostile(claim)? {
            Ok(Some(raw)) => raw,
            Ok(None) => continue,
            Err(_) => {
                // Not a regular file of at most 64 KiB: never a taker's claim. A FIFO, a link
                // or an oversized file is unlinked; a directory cannot be, and is skipped.
                log::info!(
                    "clearing {}: not a regular file of at most 64 KiB",
                    claim.name()
                );
                let _ = claim.remove();
                continue;
            }
        };
        let judged = match Record::parse(&raw) {
            Ok(_) if current.as_deref() != Some(claim.name()) => None,
            Ok(record) => Some((
                options
                    .liveness
                    .judge_claim(&record, &Now::of(&*options.clock)),
                record.pid(),
            )),
            Err(_) => None,
        };
        match judged {
            None | Some((Judgement::Dead(_), _)) => {
                log::info!(
                    "clearing {}: a crashed takeover's, or not for the record now at {}",
                    claim.name(),
                    path.name()
                );
                // Changed means it was replaced under us by a writer outside the protocol.
                let _ = claim.remove_if_unchanged(&raw)?;
            }
            Some((Judgement::Live(_), claimant)) => {
                return Ok(Some(Refusal {
                    resource: path.name().to_owned(),
                    holder: record.and_then(|raw| Record::parse(raw).ok()),
                    why: LiveWhy::TakeoverInProgress {
                        claim: claim.name().to_owned(),
                        claimant,
                    },
                }));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::{claim_name, is_claim_of};

    #[test]
    fn claim_names_use_the_first_16_hex_of_sha256() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223...
        assert_eq!(
            claim_name("agent-0.lock", b"abc"),
            "agent-0.lock.ba7816bf8f01cfea.claim"
        );
        assert!(is_claim_of(
            "agent-0.lock",
            "agent-0.lock.ba7816bf8f01cfea.claim"
        ));
        assert!(
            !is_claim_of("agent-0.lock", "agent-0.lock.ba7816bf8f01cfe.claim"),
            "15 hex"
        );
        assert!(!is_claim_of(
            "agent-0.lock",
            "agent-1.lock.ba7816bf8f01cfea.claim"
        ));
        assert!(!is_claim_of("agent-0.lock", "agent-0.lock.epoch.1"));
    }
}
