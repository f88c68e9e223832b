//! Guard names and the reserved-name predicate.
//!
//! The guard of resource file `F` is `.F.flock` in the same directory; while it is being
//! published it also exists under a temp alias `.F.flock.tmp-<token>`. Ordinary code must never
//! create, replace or remove either, whatever spelling it uses, so [`is_reserved`] compares the
//! *normalized* form of a name: NFKC, default-ignorable code points removed, lowercased.

use unicode_normalization::UnicodeNormalization;

/// Suffix that turns a resource file name into its guard name (after a leading `.`).
pub const GUARD_SUFFIX: &str = ".flock";

/// What follows a guard name in one of its publication temp aliases, before the random token.
pub const GUARD_TEMP_INFIX: &str = ".flock.tmp-";

/// The longest file name accepted on the filesystems worklane supports (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Length of the random token in temp names, in hex digits.
pub const TOKEN_LEN: usize = 16;

/// Longest resource name whose guard temp alias `.F.flock.tmp-<16 hex>` still fits `NAME_MAX`.
pub const RESOURCE_NAME_MAX: usize = NAME_MAX - 1 - GUARD_TEMP_INFIX.len() - TOKEN_LEN;

/// The guard file name of resource file `resource`: `.{resource}.flock`.
#[must_use]
pub fn guard_name(resource: &str) -> String {
    let mut name = String::with_capacity(resource.len() + 1 + GUARD_SUFFIX.len());
    name.push('.');
    name.push_str(resource);
    name.push_str(GUARD_SUFFIX);
    name
}

/// A publication temp alias of the guard of `resource`: `.{resource}.flock.tmp-{token}`.
#[must_use]
pub fn guard_temp_name(resource: &str, token: &str) -> String {
    format!(".{resource}{GUARD_TEMP_INFIX}{token}")
}

/// The canonical form of a name for reservation checks: default-ignorable code points removed,
/// NFKC, lowercase, then both again (lowercasing and NFKC can each expose work for the other).
#[must_use]
pub(crate) fn normalize(name: &str) -> String {
    // ASCII is its own NFKC form and holds no default-ignorable code point.
    if name.is_ascii() {
        return name.to_ascii_lowercase();
    }
    let once = fold(name);
    let twice = fold(&once);
    if once == twice { once } else { fold(&twice) }
}

fn fold(name: &str) -> String {
    let visible: String = name.chars().filter(|c| !is_default_ignorable(*c)).collect();
    let nfkc: String = visible.nfkc().collect();
    nfkc.to_lowercase()
        .chars()
        .filter(|c| !is_default_ignorable(*c))
        .collect()
}

/// Whether `name` is, or could be taken by a filesystem or a person for, a guard name or a
/// guard's temp alias.
///
/// True when the normalized name (default-ignorable code points such as U+200B removed, NFKC,
/// lowercase) ends with `.flock` or contains `.flock.tmp-`. This is a
/// deliberate superset of the names the guard crate creates: `x.flock` is reserved too, so no
/// ordinary file's temp alias (`.x.flock.tmp-…`) can ever look like a guard's.
#[must_use]
pub fn is_reserved(name: &str) -> bool {
    if name.is_ascii() {
        // ASCII is its own NFKC form with nothing ignorable: compare case-insensitively in
        // place, without building the normalized copy (this runs for every listed name).
        let b = name.as_bytes();
        let suffix = GUARD_SUFFIX.as_bytes();
        let infix = GUARD_TEMP_INFIX.as_bytes();
        return (b.len() >= suffix.len()
            && b[b.len() - suffix.len()..].eq_ignore_ascii_case(suffix))
            || b.windows(infix.len())
                .any(|w| w.eq_ignore_ascii_case(infix));
    }
    let n = normalize(name);
    n.ends_with(GUARD_SUFFIX) || n.contains(GUARD_TEMP_INFIX)
}

/// Unicode `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt, Unicode 15.1).
///
/// These render as nothing, so `.x.f\u{200B}lock` would look like a guard to a person while
/// being a different file to the kernel.
#[must_use]
pub(crate) fn is_default_ignorable(c: char) -> bool {
    const RANGES: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x034F, 0x034F),
        (0x061C, 0x061C),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x206F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFF8),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    ];
    let c = u32::from(c);
    RANGES.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// Why a name cannot be used as a resource (or slot file) name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// The name is `.` or `..`.
    Dots,
    /// The name holds a `/`, so it is not a single path component.
    Slash,
    /// The name holds a NUL byte.
    Nul,
    /// The name starts with `.`, which is kept for guards and temp files.
    LeadingDot,
    /// The name is a guard name or a guard temp alias (after normalization).
    Reserved,
    /// The name is too long to carry the guard suffix and temp token within `NAME_MAX`.
    TooLong,
}

impl std::fmt::Display for NameProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Empty => "the name is empty",
            Self::Dots => "`.` and `..` are not file names",
            Self::Slash => "a name is one path component and may not contain `/`",
            Self::Nul => "a name may not contain a NUL byte",
            Self::LeadingDot => "names starting with `.` are kept for guards and temp files",
            Self::Reserved => {
                "the name is (or normalizes to) a guard name `.F.flock` or a guard temp alias; \
                 guards are created only by worklane-guard"
            }
            Self::TooLong => {
                "the name is too long: with the guard suffix and temp token it would exceed \
                 the filesystem's 255-byte limit"
            }
        })
    }
}

/// Checks that `name` can name a resource: a single component, no leading dot, not reserved, and
/// short enough for its guard temp alias to fit `NAME_MAX`.
pub fn check_resource_name(name: &str) -> Result<(), NameProblem> {
    if name.is_empty() {
        return Err(NameProblem::Empty);
    }
    if name == "." || name == ".." {
        return Err(NameProblem::Dots);
    }
    if name.contains('/') {
        return Err(NameProblem::Slash);
    }
    if name.contains('\0') {
        return Err(NameProblem::Nul);
    }
    if name.starts_with('.') {
        return Err(NameProblem::LeadingDot);
    }
    if is_reserved(name) {
        return Err(NameProblem::Reserved);
    }
    if name.len() > RESOURCE_NAME_MAX {
        return Err(NameProblem::TooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_guard_and_temp_names_are_reserved() {
        assert!(
            is_reserved(&guard_name("agent-0.lock")),
            "guard name must be reserved"
        );
        assert!(
            is_reserved(&guard_temp_name("agent-0.lock", "0123456789abcdef")),
            "guard temp alias must be reserved"
        );
        assert!(!is_reserved("agent-0.lock"), "a lock name is not reserved");
        assert!(
            !is_reserved(".agent-0.lock.tmp-0123"),
            "a slot temp name is not reserved"
        );
        assert!(!is_reserved("flock"), "a bare word is not reserved");
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(check_resource_name(""), Err(NameProblem::Empty));
        assert_eq!(check_resource_name(".."), Err(NameProblem::Dots));
        assert_eq!(check_resource_name("a/b"), Err(NameProblem::Slash));
        assert_eq!(check_resource_name("a\0b"), Err(NameProblem::Nul));
        assert_eq!(check_resource_name(".hidden"), Err(NameProblem::LeadingDot));
        assert_eq!(check_resource_name("x.FLOCK"), Err(NameProblem::Reserved));
        let long = "a".repeat(RESOURCE_NAME_MAX + 1);
        assert_eq!(check_resource_name(&long), Err(NameProblem::TooLong));
        let fits = "a".repeat(RESOURCE_NAME_MAX);
        assert_eq!(check_resource_name(&fits), Ok(()));
        assert_eq!(
            guard_temp_name(&fits, &"f".repeat(TOKEN_LEN)).len(),
            NAME_MAX
        );
    }

    #[test]
    fn ignorable_table_edges() {
        for c in [
            '\u{00AD}',
            '\u{200B}',
            '\u{2060}',
            '\u{FEFF}',
            '\u{E0001}',
            '\u{E0FFF}',
        ] {
            assert!(
                is_default_ignorable(c),
                "{:#x} is default-ignorable",
                u32::from(c)
            );
        }
        for c in ['a', '.', '\u{200A}', '\u{2070}', '\u{E1000}', '\u{FF0E}'] {
            assert!(
                !is_default_ignorable(c),
                "{:#x} is not default-ignorable",
                u32::from(c)
            );
        }
    }

    #[test]
    fn every_name_problem_says_what_is_wrong() {
        let said = [
            (NameProblem::Empty, "empty"),
            (NameProblem::Dots, "`.` and `..`"),
            (NameProblem::Slash, "`/`"),
            (NameProblem::Nul, "NUL"),
            (NameProblem::LeadingDot, "starting with `.`"),
            (NameProblem::Reserved, "`.F.flock`"),
            (NameProblem::TooLong, "255-byte"),
        ];
        let mut messages = std::collections::HashSet::new();
        for (problem, point) in said {
            let message = problem.to_string();
            assert!(
                message.contains(point),
                "{problem:?} must say {point:?}, said {message:?}"
            );
            assert!(
                messages.insert(message.clone()),
                "{problem:?} must not share its message with another problem: {message:?}"
            );
        }
    }

    #[test]
    fn normalization_folds_again_when_lowercasing_exposes_a_composition() {
        // One fold lowercases a capital with a combining mark that has no precomposed capital;
        // the lowercase letter with that mark does have a precomposed form, which only a second
        // NFKC finds (and in the last case, a canonical reordering).
        for (name, folded) in [
            ("J\u{30C}", "\u{1F0}"),
            ("H\u{331}", "\u{1E96}"),
            ("T\u{308}", "\u{1E97}"),
            ("W\u{30A}", "\u{1E98}"),
            ("Y\u{30A}", "\u{1E99}"),
            ("\u{130}\u{316}", "i\u{316}\u{307}"),
        ] {
            let once = fold(name);
            assert_ne!(
                fold(&once),
                once,
                "{name:?}: one fold alone is not yet the normal form"
            );
            assert_eq!(normalize(name), folded, "{name:?} normalizes to {folded:?}");
            assert_eq!(
                normalize(folded),
                folded,
                "{folded:?} is its own normal form"
            );
        }
    }

    /// Replaces ASCII letters and `.` and `-` by a compatibility form that NFKC maps back.
    fn fullwidth(c: char) -> char {
        match c {
            '!'..='~' => char::from_u32(u32::from(c) - 0x21 + 0xFF01).expect("fullwidth form"),
            _ => c,
        }
    }

    const IGNORABLES: &[char] = &[
        '\u{00AD}',
        '\u{034F}',
        '\u{200B}',
        '\u{200C}',
        '\u{200D}',
        '\u{2060}',
        '\u{FEFF}',
        '\u{180E}',
        '\u{FE0F}',
        '\u{E0020}',
        '\u{3164}',
    ];

    #[derive(Debug, Clone)]
    enum Disguise {
        Upper,
        Fullwidth,
        Ignorable(usize),
        Plain,
    }

    fn disguise() -> impl Strategy<Value = Disguise> {
        prop_oneof![
            Just(Disguise::Upper),
            Just(Disguise::Fullwidth),
            (0..IGNORABLES.len()).prop_map(Disguise::Ignorable),
            Just(Disguise::Plain),
        ]
    }

    fn apply(name: &str, plan: &[Disguise]) -> String {
        let mut out = String::new();
        for (i, c) in name.chars().enumerate() {
            match plan[i % plan.len()] {
                Disguise::Upper => out.extend(c.to_uppercase()),
                Disguise::Fullwidth => out.push(fullwidth(c)),
                Disguise::Ignorable(k) => {
                    out.push(IGNORABLES[k]);
                    out.push(c);
                }
                Disguise::Plain => out.push(c),
            }
        }
        out
    }

    proptest! {
        #[test]
        fn disguised_guard_names_stay_reserved(
            resource in "[a-z0-9][a-z0-9._-]{0,30}",
            token in "[0-9a-f]{16}",
            plan in proptest::collection::vec(disguise(), 1..8),
            trailing in proptest::option::of(0..IGNORABLES.len()),
        ) {
            for name in [guard_name(&resource), guard_temp_name(&resource, &token)] {
                let mut disguised = apply(&name, &plan);
                if let Some(k) = trailing {
                    disguised.push(IGNORABLES[k]);
                }
                prop_assert!(
                    is_reserved(&disguised),
                    "{disguised:?} (a disguise of {name:?}) must be reserved"
                );
                prop_assert_eq!(
                    check_resource_name(&disguised).is_ok(),
                    false,
                    "{:?} must be refused as a resource name",
                    disguised
                );
            }
        }

        #[test]
        fn ordinary_names_are_not_reserved(resource in "[a-z0-9][a-z0-9_-]{0,20}(\\.lock|\\.json)?") {
            prop_assert!(!is_reserved(&resource), "{resource:?} must not be reserved");
            prop_assert!(check_resource_name(&resource).is_ok());
        }

        #[test]
        fn the_ascii_fast_path_agrees_with_normalization(name in "[ -~]{0,40}") {
            let slow = {
                let n = normalize(&name);
                n.ends_with(GUARD_SUFFIX) || n.contains(GUARD_TEMP_INFIX)
            };
            prop_assert_eq!(is_reserved(&name), slow, "{:?}", name);
        }

        #[test]
        fn normalize_is_idempotent(s in "\\PC{0,24}") {
            let n = normalize(&s);
            prop_assert_eq!(normalize(&n), n.clone());
        }
    }
}
