//! The web UI served from the binary: `/` and `/ui` redirect to `/ui/`,
//! the index carries the agent's settings as Consul's does, client routes
//! get the app shell (200) and missing files a 404, every page a strict
//! Content-Security-Policy; `-ui-content-path` moves it all, `-ui-dir`
//! serves another directory (never a file outside it), and with the UI off
//! `/ui/` is an ordinary unknown path.

mod common;

use common::{header, http_request_full, TestAgent};
use serde_json::Value;

fn get(agent: &TestAgent, path: &str) -> (u16, Vec<(String, String)>, String) {
    http_request_full(agent.http_port, "GET", path, &[], None)
}

/// The settings a rendered index carries.
fn settings(page: &str) -> Value {
    let start =
        page.find("data-consul-ui-config>").expect("config block") + "data-consul-ui-config>".len();
    let end = page[start..].find("</script>").unwrap() + start;
    serde_json::from_str(page[start..end].trim()).unwrap()
}

#[test]
fn the_built_in_ui_is_served_with_its_settings_under_a_strict_policy() {
    let agent = TestAgent::dev(&[]);
    for (path, to) in [("/", "/ui/"), ("/ui", "/ui/"), ("/ui/index.html", "/ui/")] {
        let (status, headers, _) = get(&agent, path);
        assert_eq!(
            (status, header(&headers, "location")),
            (301, Some(to)),
            "{path}"
        );
    }
    for path in ["/ui/", "/ui/dc1/services", "/ui/dc1/services/web/instances"] {
        let (status, headers, page) = get(&agent, path);
        assert_eq!(status, 200, "{path}");
        assert!(header(&headers, "content-type")
            .unwrap()
            .starts_with("text/html"));
        let policy = header(&headers, "content-security-policy").unwrap();
        assert!(
            policy.contains("script-src 'self'") && !policy.contains("unsafe"),
            "{policy}"
        );
        assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));
        let config = settings(&page);
        assert_eq!(config["ContentPath"], "/ui/");
        assert_eq!(config["LocalDatacenter"], "dc1");
        assert_eq!(config["ACLsEnabled"], false);
        assert_eq!(config["UIConfig"]["metrics_proxy_enabled"], false);
        assert!(page.contains("src=\"/ui/assets/app.js\""));
    }
    let (status, headers, script) = get(&agent, "/ui/assets/app.js");
    assert_eq!(status, 200);
    assert!(header(&headers, "content-type")
        .unwrap()
        .starts_with("text/javascript"));
    assert!(script.contains("htm-preact-3.1.1.js"));
    let (status, _, _) = get(&agent, "/ui/assets/vendor/htm-preact-3.1.1.js");
    assert_eq!(status, 200);
    // Names with dots are client routes too (services, nodes).
    let (status, _, page) = get(&agent, "/ui/dc1/nodes/ip-10-0-0-1.ec2.internal");
    assert_eq!(status, 200);
    assert!(page.contains("data-consul-ui-config"));
    for missing in ["/ui/assets/nope.js", "/ui/assets/vendor/none.css"] {
        let (status, _, body) = get(&agent, missing);
        assert_eq!(
            (status, body.as_str()),
            (404, "404 page not found\n"),
            "{missing}"
        );
    }
    let (status, _, robots) = get(&agent, "/robots.txt");
    assert_eq!(
        (status, robots.as_str()),
        (200, "User-agent: *\nDisallow: /\n")
    );
    // Only reads reach the UI; the API's paths are the API's.
    let (status, _, body) = http_request_full(agent.http_port, "POST", "/ui/", &[], None);
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = get(&agent, "/v1/no/such");
    assert_eq!(status, 404);
}

#[test]
fn the_content_path_moves_the_ui_and_the_ui_can_be_off() {
    let agent = TestAgent::dev(&["-ui-content-path=console"]);
    let (status, headers, _) = get(&agent, "/");
    assert_eq!(
        (status, header(&headers, "location")),
        (301, Some("/console/"))
    );
    let (status, _, page) = get(&agent, "/console/dc1/nodes");
    assert_eq!(status, 200);
    assert_eq!(settings(&page)["ContentPath"], "/console/");
    assert!(page.contains("href=\"/console/assets/style.css\""));
    let (status, _, _) = get(&agent, "/console/assets/style.css");
    assert_eq!(status, 200);
    let (status, _, _) = get(&agent, "/ui/");
    assert_eq!(status, 404);

    let off = TestAgent::dev(&["-hcl=ui_config { enabled = false }"]);
    let (status, _, body) = get(&off, "/ui/");
    assert_eq!(status, 404);
    assert!(
        body.contains("ensure the path starts with '/v1/'"),
        "{body}"
    );

    // At the root: `/` is the UI itself, or, with the UI off, Consul's text.
    let at_root = TestAgent::dev(&["-ui-content-path=/"]);
    let (status, _, page) = get(&at_root, "/");
    assert_eq!(status, 200);
    assert_eq!(settings(&page)["ContentPath"], "/");
    let off_at_root = TestAgent::dev(&["-ui-content-path=/", "-hcl=ui_config { enabled = false }"]);
    let (status, _, body) = get(&off_at_root, "/");
    assert_eq!(status, 200);
    assert!(body.starts_with("Consul Agent: UI disabled."), "{body}");
    // A content path that is not a plain path is refused.
    let text = common::run_agent_expecting_failure(&[
        "-dev",
        "-dns-port=-1",
        "-grpc-port=-1",
        "-ui-content-path=/ui\"><script>",
    ]);
    assert!(text.contains("ui_config.content_path"), "{text}");
}

#[test]
fn a_ui_dir_is_served_instead_and_never_outside_itself() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ui");
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(root.path().join("secret.txt"), "outside").unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<html><script type=\"application/json\" data-consul-ui-config>{{jsonEncode .}}</script>\
         <link href=\"{{.ContentPath}}assets/own.css\"></html>",
    )
    .unwrap();
    std::fs::write(dir.join("assets/own.css"), "body{}").unwrap();
    let agent = TestAgent::start(&[
        "-dev",
        "-hcl=ui_config { enabled = false }",
        &format!("-ui-dir={}", dir.display()),
    ]);
    let (status, _, page) = get(&agent, "/ui/dc1/services");
    assert_eq!(status, 200);
    assert!(page.contains("href=\"/ui/assets/own.css\""), "{page}");
    assert_eq!(settings(&page)["LocalDatacenter"], "dc1");
    let (status, headers, css) = get(&agent, "/ui/assets/own.css");
    assert_eq!((status, css.as_str()), (200, "body{}"));
    assert!(header(&headers, "content-type")
        .unwrap()
        .starts_with("text/css"));
    // The built-in assets are not there.
    let (status, _, _) = get(&agent, "/ui/assets/app.js");
    assert_eq!(status, 404);
    for escape in [
        "/ui/../secret.txt",
        "/ui/assets/../../secret.txt",
        "/ui/..%2fsecret.txt",
    ] {
        let (status, _, body) = get(&agent, escape);
        assert!(!body.contains("outside"), "{escape}: {status} {body}");
    }
}

/// Built-in text assets go gzipped to a client that accepts it, unchanged
/// to one that does not (or refuses gzip with `q=0`), with `Vary`.
#[test]
fn built_in_assets_go_gzipped_to_clients_that_accept_it() {
    use std::io::Read;
    let agent = TestAgent::dev(&[]);
    let fetch = |accept: &[(&str, &str)]| {
        common::try_http_request_full(agent.http_port, "GET", "/ui/assets/lib.js", accept, None)
            .unwrap()
    };
    let (status, headers, plain) = fetch(&[]);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-encoding"), None);
    assert_eq!(header(&headers, "vary"), Some("Accept-Encoding"));
    let (status, headers, packed) = fetch(&[("Accept-Encoding", "gzip, deflate, br")]);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-encoding"), Some("gzip"));
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(&packed[..])
        .read_to_end(&mut unpacked)
        .unwrap();
    assert_eq!(unpacked, plain);
    assert!(
        packed.len() * 2 < plain.len(),
        "{} of {}",
        packed.len(),
        plain.len()
    );
    let (_, headers, body) = fetch(&[("Accept-Encoding", "gzip;q=0")]);
    assert_eq!((header(&headers, "content-encoding"), body), (None, plain));
}
