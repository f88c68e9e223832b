//! Where the exposition goes: a textfile replaced whole, and `GET /metrics` over real TCP.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use worklane_view::metrics::serve;

#[test]
fn the_textfile_is_replaced_whole_readable_by_node_exporter_and_no_temp_is_left() {
    let temp = tempfile::tempdir().expect("temp");
    let path = temp.path().join("worklane.prom");
    std::fs::write(&path, "old\n").expect("old");
    serve::write_textfile(&path, "worklane_up 1\n").expect("write");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "worklane_up 1\n"
    );
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
    let names: Vec<_> = std::fs::read_dir(temp.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["worklane.prom"], "no temp file left");
    assert!(matches!(
        serve::write_textfile(std::path::Path::new("/"), "x"),
        Err(serve::Error::NoFileName { .. })
    ));
    // The temp file is made beside the textfile, in its directory, so that the rename is
    // within one: in a directory that is not there, the first step fails.
    let missing = temp.path().join("no/such/dir/x.prom");
    assert!(matches!(
        serve::write_textfile(&missing, "x"),
        Err(serve::Error::Textfile {
            step: "create a temp file beside it",
            ..
        })
    ));
}

#[test]
fn a_port_alone_is_on_the_loopback_address() {
    assert_eq!(serve::address("9100"), "127.0.0.1:9100");
    assert_eq!(serve::address("0.0.0.0:9100"), "0.0.0.0:9100");
    assert_eq!(serve::address(""), "");
}

fn ask(addr: std::net::SocketAddr, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    // What arrives before the server closes (a reset after the answer ends the read too).
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(answer).expect("text")
}

#[test]
fn get_metrics_is_answered_fresh_other_paths_404_other_methods_405_and_an_error_500() {
    let listener = serve::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    // The server serves for ever: it runs on a thread of its own, left to the process's end.
    std::thread::spawn(move || {
        let scrapes = std::sync::atomic::AtomicU32::new(0);
        serve::serve(&listener, &|| {
            let n = scrapes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n == 2 {
                Err("the journal cannot be read".to_owned())
            } else {
                Ok(format!("worklane_scrape {n}\n"))
            }
        });
    });
    let first = ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(first.contains("Content-Type: "), "{first}");
    assert!(first.ends_with("\r\n\r\nworklane_scrape 0\n"), "{first}");
    let second = ask(addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    assert!(
        second.ends_with("worklane_scrape 1\n"),
        "fresh each time: {second}"
    );
    let failed = ask(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(failed.starts_with("HTTP/1.1 500"), "{failed}");
    assert!(failed.ends_with("the journal cannot be read\n"), "{failed}");
    let head = ask(addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "no body to a HEAD: {head}");
    let other = ask(addr, "GET / HTTP/1.1\r\n\r\n");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
    let post = ask(addr, "POST /metrics HTTP/1.1\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
}

/// A server on a free loopback port that answers every scrape with `ok`.
fn server() -> std::net::SocketAddr {
    let listener = serve::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || serve::serve(&listener, &|| Ok("ok\n".to_owned())));
    addr
}

#[test]
fn a_head_that_trickles_in_is_read_to_its_end_before_it_is_answered() {
    let addr = server();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(b"GET /met").expect("send");
    std::thread::sleep(std::time::Duration::from_millis(200));
    stream.write_all(b"rics HTTP/1.1\r\n\r\n").expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
}

#[test]
fn a_head_of_8_kib_without_its_end_is_answered_at_once_from_what_came() {
    let addr = server();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .expect("timeout");
    let mut head = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    head.resize(8192, b'a');
    stream.write_all(&head).expect("send");
    // The connection stays open: the answer comes because 8 KiB is all a head may be, not
    // because the client is done (the head's deadline is 5 s, this read's 3 s).
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => panic!("no answer within 3 s: {e}"),
        }
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn a_connection_past_the_limit_is_told_to_come_back() {
    let addr = server();
    // MAX_CONNECTIONS silent clients, each held open by the server for its head's deadline.
    let silent: Vec<_> = (0..serve::MAX_CONNECTIONS)
        .map(|_| std::net::TcpStream::connect(addr).expect("connect"))
        .collect();
    // Asked until the server has taken them all in (each stays counted for its head's 5 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
    let answer = loop {
        let answer = ask(addr, "GET /metrics HTTP/1.1\r\n\r\n");
        if answer.starts_with("HTTP/1.1 503") || std::time::Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{answer}"
    );
    assert!(answer.contains("Retry-After: 1\r\n"), "{answer}");
    drop(silent);
}
