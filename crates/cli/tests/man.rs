use super::*;

#[test]
fn man_all_writes_a_page_per_command_and_man_prints_one() {
    let site = Site::new(None);
    let dir = site.file("man");
    let out = site.output(&["man", "--all", dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{out:?}");
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .expect("the pages' directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        listed.lines().count(),
        written.len(),
        "each page listed: {listed}"
    );
    for name in [
        "worklane.1",
        "worklane-run.1",
        "worklane-lease.1",
        "worklane-lease-run.1",
        "worklane-config-set.1",
        "worklane-budget-observe.1",
        "worklane-queue-full-run.1",
        "worklane-man.1",
    ] {
        assert!(written.iter().any(|n| n == name), "{name} in {written:?}");
    }
    let page = std::fs::read_to_string(dir.join("worklane-run.1")).expect("run's page");
    assert!(page.contains(".TH worklane-run 1"), "{page}");
    assert!(page.contains("status\\-fd"), "run's own options: {page}");
    let version = env!("CARGO_PKG_VERSION");
    for name in &written {
        let page = std::fs::read_to_string(dir.join(name)).expect("a page");
        let title = page
            .lines()
            .find(|l| l.starts_with(".TH "))
            .unwrap_or_else(|| panic!("{name} has a title: {page}"));
        assert!(
            title.contains(&format!("\"worklane {version}\"")),
            "{name}'s footer is worklane's version, as the top page's: {title}"
        );
        if name != "worklane.1" {
            assert!(
                page.contains(".SH \"EXIT STATUS\"\n.TP\n\\fB"),
                "{name} lists its exit codes: {page}"
            );
        }
    }
    let stop_all = std::fs::read_to_string(dir.join("worklane-stop-all.1")).expect("page");
    let codes = stop_all
        .split(".SH \"EXIT STATUS\"")
        .nth(1)
        .expect("EXIT STATUS");
    assert!(
        codes.contains("\\fB0\\fR\nSTOP is in force") && codes.contains("\\fB78\\fR"),
        "stop-all's own codes: {codes}"
    );

    let out = site.output(&["man", "lease", "run"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        out.stdout,
        std::fs::read(dir.join("worklane-lease-run.1")).expect("page"),
        "`man lease run` prints the page --all writes"
    );
    let out = site.output(&["man", "no-such"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}
