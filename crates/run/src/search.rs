//! Where execvp(3) looks for a program: a plain function, tested on every platform, which the
//! Linux start ([`crate::sys`]) tries in order.

/// The paths execvp(3) tries for `program`, in order, as glibc's does: `program` itself when
/// it holds a `/`; else each entry of `path` (`PATH`; `/bin:/usr/bin` when unset, glibc's
/// default) joined to it, an empty entry meaning the current directory (the bare name, as
/// glibc tries it). An empty `program` has none (ENOENT). An entry of `PATH_MAX` bytes or
/// more is skipped, as glibc skips it (its exec could only fail with ENAMETOOLONG, which
/// would end the search before the entries after it); glibc then also tries the bare name
/// in the current directory, a quirk of its loop that is not copied: a file `PATH` never
/// named is not run.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn search(program: &std::ffi::OsStr, path: Option<&std::ffi::OsStr>) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let name = program.as_bytes();
    if name.is_empty() {
        return Vec::new();
    }
    if name.contains(&b'/') {
        return vec![name.to_vec()];
    }
    let path = path.map_or(&b"/bin:/usr/bin"[..], OsStrExt::as_bytes);
    path.split(|&b| b == b':')
        .filter(|dir| dir.len() < PATH_MAX)
        .map(|dir| {
            if dir.is_empty() {
                name.to_vec()
            } else {
                [dir, b"/", name].concat()
            }
        })
        .collect()
}

/// Linux's `PATH_MAX`: glibc's execvp(3) skips an entry of `PATH` this long or longer.
const PATH_MAX: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(program: &str, path: Option<&str>) -> Vec<String> {
        search(
            std::ffi::OsStr::new(program),
            path.map(std::ffi::OsStr::new),
        )
        .into_iter()
        .map(|p| String::from_utf8(p).expect("utf-8"))
        .collect()
    }

    #[test]
    fn search_tries_each_path_entry_in_order_and_the_bare_name_for_an_empty_one() {
        assert_eq!(
            paths("tool", Some("/a:/b/c::/d/")),
            ["/a/tool", "/b/c/tool", "tool", "/d//tool"]
        );
        assert_eq!(paths("tool", Some("")), ["tool"]);
        assert_eq!(paths("tool", Some(":")), ["tool", "tool"]);
    }

    #[test]
    fn search_skips_an_entry_of_path_max_bytes_or_more_and_tries_no_other_path_for_it() {
        let long = format!("/{}", "d".repeat(PATH_MAX - 1));
        let shorter = format!("/{}", "d".repeat(PATH_MAX - 2));
        assert_eq!(paths("tool", Some(&format!("{long}:/a"))), ["/a/tool"]);
        assert_eq!(
            paths("tool", Some(&format!("/a:{shorter}"))),
            ["/a/tool".to_owned(), format!("{shorter}/tool")]
        );
        assert!(paths("tool", Some(&long)).is_empty());
    }

    #[test]
    fn search_uses_glibcs_default_path_when_path_is_unset() {
        assert_eq!(paths("tool", None), ["/bin/tool", "/usr/bin/tool"]);
    }

    #[test]
    fn search_takes_a_name_with_a_slash_as_it_is_and_has_nothing_for_an_empty_name() {
        assert_eq!(paths("./tool", Some("/a")), ["./tool"]);
        assert_eq!(paths("/usr/bin/env", Some("/a")), ["/usr/bin/env"]);
        assert_eq!(paths("dir/tool", None), ["dir/tool"]);
        assert!(paths("", Some("/a")).is_empty());
    }
}
