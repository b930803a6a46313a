//! The intention CLI and API through the real binary, as the seed demo
//! uses them, with config-entry writes in between.

mod common;

use common::TestAgent;
use serde_json::Value;

fn out(o: &std::process::Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn seed_demo_intention_commands_print_what_consul_prints() {
    let agent = TestAgent::dev(&[]);
    let (code, _, err) = out(&agent.cli(&["intention", "list"]));
    assert_eq!(code, Some(2));
    assert_eq!(err.trim(), "There are no intentions.");

    let (code, stdout, _) = out(&agent.cli(&["intention", "create", "-deny", "web", "db"]));
    assert_eq!(code, Some(0));
    assert_eq!(stdout.trim(), "Created: web => db (deny)");
    let (code, stdout, _) = out(&agent.cli(&["intention", "check", "web", "db"]));
    assert_eq!((code, stdout.trim()), (Some(1), "Denied"));
    let (code, stdout, _) = out(&agent.cli(&["intention", "check", "api", "db"]));
    assert_eq!((code, stdout.trim()), (Some(0), "Allowed"));

    // Creating the same pair again fails; -replace replaces it quietly.
    let (code, _, err) = out(&agent.cli(&["intention", "create", "web", "db"]));
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(
            "Error creating intention \"web => db (allow)\": Unexpected response code: 400"
        ),
        "{err}"
    );
    let (code, stdout, _) = out(&agent.cli(&[
        "intention",
        "create",
        "-replace",
        "-allow",
        "-meta",
        "owner=ops",
        "web",
        "db",
    ]));
    assert_eq!((code, stdout.as_str()), (Some(0), ""));
    let (code, stdout, _) = out(&agent.cli(&["intention", "check", "web", "db"]));
    assert_eq!((code, stdout.trim()), (Some(0), "Allowed"));

    // get shows the legacy id and meta; get by that id works too.
    let (code, stdout, _) = out(&agent.cli(&["intention", "get", "web", "db"]));
    assert_eq!(code, Some(0));
    assert!(stdout.contains("Source:       web"), "{stdout}");
    assert!(stdout.contains("Action:       allow"), "{stdout}");
    assert!(stdout.contains("Meta[owner]:  ops"), "{stdout}");
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ID:"))
        .unwrap()
        .trim()
        .to_string();
    let (code, by_id, _) = out(&agent.cli(&["intention", "get", &id]));
    assert_eq!(code, Some(0));
    assert_eq!(by_id, stdout);

    // list and match.
    agent.cli(&["intention", "create", "-deny", "*", "db"]);
    let (code, stdout, _) = out(&agent.cli(&["intention", "list"]));
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("ID"), "{stdout}");
    assert!(lines[0].contains("Source") && lines[0].ends_with("Precedence"));
    assert!(lines[1].contains(&id) && lines[1].contains("web") && lines[1].ends_with('9'));
    assert!(lines[2].contains('*') && lines[2].ends_with('8'));
    let (code, stdout, _) = out(&agent.cli(&["intention", "match", "db"]));
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "web => db (allow)\n* => db (deny)\n");

    // The seed demo's delete.
    let (code, stdout, _) = out(&agent.cli(&["intention", "delete", "web", "db"]));
    assert_eq!((code, stdout.trim()), (Some(0), "Intention deleted."));
    let (code, _, err) = out(&agent.cli(&["intention", "get", "web", "db"]));
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "Intention not found with source \"web\" and destination \"db\""
    );

    // A config entry written with `config write` shows up as intentions
    // (without a legacy id) and is enforced.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("db-intentions.hcl");
    std::fs::write(
        &file,
        "Kind = \"service-intentions\"\nName = \"db\"\nSources = [\n  { Name = \"web\", Action = \"deny\" },\n  { Name = \"api\", Action = \"allow\" }\n]\n",
    )
    .unwrap();
    let (code, stdout, err) = out(&agent.cli(&["config", "write", file.to_str().unwrap()]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(stdout.trim(), "Config entry written: service-intentions/db");
    let (_, stdout, _) = out(&agent.cli(&["intention", "check", "web", "db"]));
    assert_eq!(stdout.trim(), "Denied");
    let got: Value = agent
        .get("/v1/connect/intentions/exact?source=api&destination=db")
        .unwrap();
    assert!(got.get("ID").is_none());
    assert_eq!(got["Precedence"], 9);
    // The legacy by-ID API refuses a destination owned by a config entry.
    let (status, _, body) = agent.request(
        "POST",
        "/v1/connect/intentions",
        Some(r#"{"SourceName":"billing","DestinationName":"db","Action":"allow"}"#),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("cannot use legacy intention API"), "{body}");
}

#[test]
fn intention_endpoints_reject_bad_input_clearly() {
    let agent = TestAgent::dev(&[]);
    let cases = [
        (
            "GET",
            "/v1/connect/intentions/exact?source=web",
            400,
            "required query parameter 'destination' not set",
        ),
        (
            "GET",
            "/v1/connect/intentions/match?name=db",
            400,
            "required query parameter 'by' not set",
        ),
        (
            "GET",
            "/v1/connect/intentions/match?by=sideways&name=db",
            400,
            "'by' parameter must be one of 'source' or 'destination'",
        ),
        (
            "GET",
            "/v1/connect/intentions/match?by=source",
            400,
            "required query parameter 'name' not set",
        ),
        (
            "GET",
            "/v1/connect/intentions/check?source=a/b/c/d&destination=db",
            400,
            "at most two '/'",
        ),
        (
            "GET",
            "/v1/connect/intentions/exact?source=web&destination=db",
            404,
            "Intention not found",
        ),
        (
            "GET",
            "/v1/connect/intentions/00000000-0000-0000-0000-000000000000",
            404,
            "Intention not found",
        ),
        (
            "GET",
            "/v1/connect/intentions/not-a-uuid",
            400,
            "not a UUID",
        ),
        (
            "DELETE",
            "/v1/connect/intentions/00000000-0000-0000-0000-000000000000",
            404,
            "Cannot delete non-existent intention",
        ),
    ];
    for (method, path, status, needle) in cases {
        let (got, _, body) = agent.request(method, path, None);
        assert_eq!(got, status, "{method} {path}: {body}");
        assert!(body.contains(needle), "{method} {path}: {body}");
    }
    let (status, _, body) = agent.request("POST", "/v1/connect/intentions", Some("{nope"));
    assert_eq!(status, 400);
    assert!(body.contains("Request decode failed"), "{body}");
    let (status, _, body) = agent.request(
        "POST",
        "/v1/agent/connect/authorize",
        Some(r#"{"ClientCertURI":"spiffe://x.consul/ns/default/dc/dc1/svc/web"}"#),
    );
    assert_eq!(
        (status, body.trim()),
        (400, "Target service must be specified")
    );
    let (status, _, body) = agent.request(
        "POST",
        "/v1/agent/connect/authorize",
        Some(r#"{"Target":"db","ClientCertURI":"https://example.com"}"#),
    );
    assert_eq!(
        (status, body.trim()),
        (400, "ClientCertURI not a valid Connect identifier")
    );
    let (status, _, body) = agent.request(
        "POST",
        "/v1/agent/connect/authorize",
        Some(r#"{"Target":"db","ClientCertURI":"spiffe://x.consul/agent/client/dc/dc1/id/n1"}"#),
    );
    assert_eq!(
        (status, body.trim()),
        (400, "ClientCertURI not a valid Service identifier")
    );
    let (status, _, body) = agent.request(
        "POST",
        "/v1/agent/connect/authorize",
        Some(r#"{"Target":"db","ClientCertURI":"spiffe://elsewhere.consul/ns/default/dc/dc1/svc/web"}"#),
    );
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["Authorized"], false);
    assert_eq!(
        answer["Reason"],
        "Identity from an external trust domain: elsewhere.consul"
    );
    let (code, _, err) = out(&agent.cli(&["intention", "create", "-allow", "-deny", "a", "b"]));
    assert_eq!(code, Some(1));
    assert_eq!(err.trim(), "Only one of -allow or -deny may be specified.");
    let (code, _, err) = out(&agent.cli(&["intention", "create", "a"]));
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "Error: Must specify two arguments: source and destination"
    );
    // -file: JSON intentions; L7 ones belong in config entries.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("i.json");
    std::fs::write(
        &file,
        r#"{"SourceName": "billing", "DestinationName": "orders", "Action": "deny"}"#,
    )
    .unwrap();
    let (code, stdout, _) =
        out(&agent.cli(&["intention", "create", "-file", file.to_str().unwrap()]));
    assert_eq!(
        (code, stdout.trim()),
        (Some(0), "Created: billing => orders (deny)")
    );
    std::fs::write(
        &file,
        r#"{"SourceName": "a", "DestinationName": "b", "Permissions": [{"Action": "allow", "HTTP": {"PathPrefix": "/"}}]}"#,
    )
    .unwrap();
    let (code, _, err) = out(&agent.cli(&["intention", "create", "-file", file.to_str().unwrap()]));
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cannot create L7 intention from file"),
        "{err}"
    );
    let (code, _, err) = out(&agent.cli(&["intention", "check", "a"]));
    assert_eq!(code, Some(2));
    assert!(err.contains("exactly two arguments"));
}
