use super::dispatcher::{enqueue, start, states};
use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

pub(super) const SHARED: u32 = 23_457;
pub(super) const MEMBER: u32 = 65_534;
pub(super) const MEMBER_GID: u32 = 12_346;

/// A site whose slot directory is root's, group `SHARED`, mode 2770 (a member can use it),
/// with `out/` a directory anyone may write (a driver of another user's says what it saw).
pub(super) fn shared_site(config: Option<&str>) -> Site {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests give the directory to a group and drop to a member (setpriv)"
    );
    let site = Site::new(config);
    std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o711))
        .expect("chmod");
    std::os::unix::fs::chown(site.slots(), Some(0), Some(SHARED)).expect("chown");
    std::fs::set_permissions(site.slots(), std::fs::Permissions::from_mode(0o2770)).expect("chmod");
    std::fs::create_dir(site.file("out")).expect("out");
    std::fs::set_permissions(site.file("out"), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    site
}

/// `worklane ARGS` as the member (uid 65534, primary group 12346, in `SHARED`).
pub(super) fn as_member(site: &Site) -> Command {
    let mut cmd = site.command("setpriv");
    cmd.args([
        &format!("--reuid={MEMBER}"),
        &format!("--regid={MEMBER_GID}"),
        &format!("--groups={SHARED}"),
    ])
    .arg(worklane_bin())
    .env("AGENT_SLOTS_DIR", site.slots())
    .env("WORKLANE_STATE_DIR", site.state())
    .env_remove("AGENT_SLOTS_CONFIG")
    .env("LANE_OUT", site.file("out"))
    .env("SECRET_OF_THE_ENQUEUER", "not for the driver")
    .stdin(Stdio::null());
    cmd
}

const WHO: &str = r#"{ id -u; id -g; id -G; echo "HOME=$HOME USER=$USER LOGNAME=$LOGNAME SHELL=$SHELL PATH=$PATH"; env | grep -c SECRET; head -1 /etc/shadow; } > "$LANE_OUT/who.tmp" 2>&1; mv "$LANE_OUT/who.tmp" "$LANE_OUT/who""#;

fn who(site: &Site) -> Vec<String> {
    wait_until("the driver's report", || site.file("out/who").exists());
    std::fs::read_to_string(site.file("out/who"))
        .expect("who")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn assert_member(lines: &[String]) {
    assert_eq!(lines[0], MEMBER.to_string(), "its uid: {lines:?}");
    assert_eq!(lines[1], MEMBER_GID.to_string(), "its gid: {lines:?}");
    let mut groups: Vec<&str> = lines[2].split_whitespace().collect();
    groups.sort_unstable();
    let mut want = [MEMBER_GID.to_string(), SHARED.to_string()];
    want.sort_unstable();
    assert_eq!(groups, want, "exactly its groups: {lines:?}");
    assert!(
        lines[3].starts_with("HOME=/nonexistent USER=nobody LOGNAME=nobody SHELL=")
            && lines[3].ends_with("PATH=/usr/local/bin:/usr/bin:/bin"),
        "its account's variables: {lines:?}"
    );
    assert_eq!(
        lines[4], "0",
        "none of the enqueuer's or dispatcher's other variables"
    );
    assert!(
        lines[5].contains("Permission denied"),
        "it cannot read what root can: {lines:?}"
    );
}

#[test]
fn a_member_s_driver_runs_as_that_member_with_its_groups_and_nothing_of_root_s() {
    let site = shared_site(None);
    let _dispatcher = start(&site, &[]);
    let out = as_member(&site)
        .args(["enqueue", "--lane", "x", "--driver", "--", "sh", "-c", WHO])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_member(&who(&site));
    let log = site.slots().join(format!("queue-{attempt}.log"));
    let meta = std::fs::metadata(&log).expect("the driver's log");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (MEMBER, SHARED, 0o640),
        "its log is the member's, readable by the group"
    );
}

#[test]
fn a_member_s_claimed_command_runs_as_that_member_too() {
    let site = shared_site(None);
    let _dispatcher = start(&site, &[]);
    let out = as_member(&site)
        .args(["enqueue", "--lane", "y", "--", "sh", "-c", WHO])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_member(&who(&site));
}

#[test]
fn a_dispatcher_that_is_not_root_queues_only_its_own_user_s_work() {
    let site = shared_site(None);
    // The member's dispatcher keeps its state in a directory of the member's own.
    let state = site.file("member-state");
    std::fs::create_dir(&state).expect("mkdir");
    std::os::unix::fs::chown(&state, Some(MEMBER), Some(MEMBER_GID)).expect("chown");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let mut dispatcher = Running::new(
        as_member(&site)
            .arg("dispatcher")
            .env("WORKLANE_STATE_DIR", &state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn the dispatcher as the member"),
    );
    let socket = site.slots().join("dispatcher.sock");
    wait_until("the member's dispatcher", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let out = enqueue(&site, &["--lane", "root-s"], "touch \"$T/root-ran\"");
    let err = String::from_utf8_lossy(&out.stderr);
    // Root's client believes no member's socket (a member may serve one of its own at the
    // directory's name): nothing is sent, neither the lane's descriptor nor the command.
    assert_eq!(out.status.code(), Some(69), "root's work is refused: {err}");
    assert!(
        err.contains(&format!("served by uid {MEMBER}")) && err.contains("nothing was sent"),
        "saying why and what to do: {err}"
    );
    assert!(
        super::dispatcher::lane_free(&site, "root-s"),
        "the refused lane is free again (the descriptor was not kept)"
    );
    let out = as_member(&site)
        .args([
            "enqueue", "--lane", "own", "--driver", "--", "sh", "-c", WHO,
        ])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = who(&site);
    assert_eq!(
        lines[0],
        MEMBER.to_string(),
        "its own work runs as itself: {lines:?}"
    );
    assert!(dispatcher.try_wait().expect("try_wait").is_none());
    assert!(states(&site).is_empty() || !site.file("root-ran").exists());
}

#[test]
fn a_claim_from_another_user_is_refused_and_the_row_stays() {
    let site = shared_site(Some(r#"{"max_agents": 1}"#));
    let _dispatcher = start(&site, &[]);
    // Root's row, whose driver hands its token to the member and waits.
    let script = r#"echo "$WORKLANE_ATTEMPT $WORKLANE_TOKEN" > "$T/token"; sleep 30"#;
    let out = site
        .worklane()
        .args(["enqueue", "--lane", "c", "--driver", "--", "sh", "-c"])
        .arg(super::driven(script))
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the driver's token", || {
        std::fs::read_to_string(site.file("token")).is_ok_and(|t| t.ends_with('\n'))
    });
    let token = std::fs::read_to_string(site.file("token")).expect("token");
    let (attempt, token) = token.trim().split_once(' ').expect("two words");
    let out = as_member(&site)
        .args(["claim", "--", "true"])
        .env("WORKLANE_ATTEMPT", attempt)
        .env("WORKLANE_TOKEN", token)
        .env("WORKLANE_SOCKET", site.slots().join("dispatcher.sock"))
        .output_gated()
        .expect("claim as the member");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("enqueued by uid 0") && err.contains("(permission)"),
        "whose it is: {err}"
    );
    assert_eq!(
        states(&site)[attempt]["state"],
        "starting",
        "the row stays with the dispatcher"
    );
}
