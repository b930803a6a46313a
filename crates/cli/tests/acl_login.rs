//! JWT auth methods through the binary: a method trusting a key the test
//! made (static PEM, a JWKS served over HTTPS with the test's own CA, and
//! OIDC discovery), binding rules on the mapped claims, login and logout
//! in Consul's shapes, and every bad JWT refused with Consul's text and
//! nothing created.

mod common;

use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::jwt::{now, Signer};
use serde_json::{json, Value};

const ISSUER: &str = "https://issuer.test";

fn claims(service: &str, groups: &[&str]) -> Value {
    let now = now();
    json!({"iss": ISSUER, "aud": "consul", "sub": service, "iat": now, "exp": now + 300,
           "service": service, "groups": groups})
}

fn login(acl: &Acl, method: &str, jwt: &str) -> (u16, String) {
    let body = json!({"AuthMethod": method, "BearerToken": jwt, "Meta": {"pod": "p-1"}});
    let (status, _, text) = acl.call("POST", "/v1/acl/login", None, Some(&body.to_string()));
    (status, text)
}

fn token_count(acl: &Acl) -> usize {
    acl.json("GET", "/v1/acl/tokens", ROOT, None)
        .as_array()
        .unwrap()
        .len()
}

/// A method over `keys` mapping `service` and `groups`, with a rule
/// binding the service identity of members of `ops`.
fn method_with_rules(acl: &Acl, name: &str, key_config: Value) {
    let mut config = json!({"BoundIssuer": ISSUER, "BoundAudiences": ["consul"],
        "ClaimMappings": {"service": "svc"}, "ListClaimMappings": {"groups": "groups"}});
    for (k, v) in key_config.as_object().unwrap() {
        config[k] = v.clone();
    }
    let method = acl.json(
        "PUT",
        "/v1/acl/auth-method",
        ROOT,
        Some(
            &json!({"Name": name, "Type": "jwt", "MaxTokenTTL": "10m", "Config": config})
                .to_string(),
        ),
    );
    assert_eq!(method["MaxTokenTTL"], "10m0s");
    acl.json(
        "PUT",
        "/v1/acl/binding-rule",
        ROOT,
        Some(
            &json!({"AuthMethod": name, "Selector": "\"ops\" in list.groups",
                     "BindType": "service", "BindName": "${value.svc}"})
            .to_string(),
        ),
    );
}

#[test]
fn a_jwt_logs_in_as_its_service_and_logs_out() {
    let acl = Acl::start();
    let signer = Signer::generate();
    method_with_rules(
        &acl,
        "static",
        json!({"JWTValidationPubKeys": [signer.public_pem()]}),
    );
    acl.json(
        "PUT",
        "/v1/acl/role",
        ROOT,
        Some(r#"{"Name": "readers", "Policies": []}"#),
    );
    acl.json(
        "PUT",
        "/v1/acl/binding-rule",
        ROOT,
        Some(r#"{"AuthMethod": "static", "BindType": "role", "BindName": "readers"}"#),
    );
    // A rule naming a role that does not exist is skipped, as in Consul.
    acl.json(
        "PUT",
        "/v1/acl/binding-rule",
        ROOT,
        Some(r#"{"AuthMethod": "static", "BindType": "role", "BindName": "ghosts"}"#),
    );

    let (status, text) = login(&acl, "static", &signer.sign(&claims("Web", &["ops"]), None));
    assert_eq!(status, 200, "{text}");
    let token: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        token["ServiceIdentities"],
        json!([{"ServiceName": "web"}]),
        "values lower-cased"
    );
    assert_eq!(token["Roles"][0]["Name"], "readers");
    assert_eq!(token["Roles"].as_array().unwrap().len(), 1);
    assert_eq!(token["AuthMethod"], "static");
    assert_eq!(token["Local"], true);
    assert_eq!(
        token["Description"],
        r#"token created via login: {"pod":"p-1"}"#
    );
    let created = humantime::parse_rfc3339(token["CreateTime"].as_str().unwrap()).unwrap();
    let expires = humantime::parse_rfc3339(token["ExpirationTime"].as_str().unwrap()).unwrap();
    assert_eq!(
        expires.duration_since(created).unwrap(),
        Duration::from_secs(600)
    );
    let secret = token["SecretID"].as_str().unwrap();
    // The token is the service's identity.
    let register = |name: &str| {
        acl.call(
            "PUT",
            "/v1/agent/service/register",
            Some(secret),
            Some(&format!(r#"{{"Name": "{name}", "Port": 80}}"#)),
        )
        .0
    };
    assert_eq!(register("web"), 200);
    assert_eq!(register("db"), 403);
    let listed = acl.json("GET", "/v1/acl/tokens?authmethod=static", ROOT, None);
    assert_eq!(listed.as_array().unwrap().len(), 1);

    // Logout deletes it; it is unknown afterwards.
    let (status, _, body) = acl.call("POST", "/v1/acl/logout", Some(secret), None);
    assert_eq!((status, body.as_str()), (200, "true"));
    let (status, _, body) = acl.call("POST", "/v1/acl/logout", Some(secret), None);
    assert_eq!((status, body.as_str()), (403, "ACL not found"));
    let (status, _, body) = acl.call("POST", "/v1/acl/logout", None, None);
    assert_eq!(
        (status, body.as_str()),
        (401, "Supplied token does not exist")
    );
    let (status, _, body) = acl.call("POST", "/v1/acl/logout", Some(ROOT), None);
    assert_eq!(
        (status, body.as_str()),
        (403, "Permission denied: token wasn't created via login")
    );

    // Deleting the method takes its rules and its tokens.
    let (status, _) = login(&acl, "static", &signer.sign(&claims("web", &["ops"]), None));
    assert_eq!(status, 200);
    let before = token_count(&acl);
    let (status, _, _) = acl.call("DELETE", "/v1/acl/auth-method/static", Some(ROOT), None);
    assert_eq!(status, 200);
    assert_eq!(token_count(&acl), before - 1);
    let rules = acl.json("GET", "/v1/acl/binding-rules", ROOT, None);
    assert_eq!(rules, json!([]));
}

#[test]
fn bad_jwts_are_refused_with_consuls_texts_and_create_nothing() {
    let acl = Acl::start();
    let signer = Signer::generate();
    method_with_rules(
        &acl,
        "m",
        json!({"JWTValidationPubKeys": [signer.public_pem()]}),
    );
    let before = token_count(&acl);
    let now = now();
    let jose = "error validating claims: go-jose/go-jose/jwt: validation failed, ";
    let with = |changes: Value| {
        let mut c = claims("web", &["ops"]);
        for (k, v) in changes.as_object().unwrap() {
            c[k] = v.clone();
        }
        signer.sign(&c, None)
    };
    let cases = [
        (
            Signer::generate().sign(&claims("web", &["ops"]), None),
            500,
            "no known key successfully validated the token signature".to_string(),
        ),
        (
            with(json!({"iss": "https://evil"})),
            500,
            format!("{jose}invalid issuer claim (iss)"),
        ),
        (
            with(json!({"aud": "other"})),
            500,
            "error validating claims: aud claim does not match any bound audience".into(),
        ),
        (
            with(json!({"exp": now - 120})),
            500,
            format!("{jose}token is expired (exp)"),
        ),
        (
            with(json!({"nbf": now + 600})),
            500,
            format!("{jose}token not valid yet (nbf)"),
        ),
        // Claims no rule selects.
        (
            with(json!({"groups": ["dev"]})),
            403,
            "Permission denied".into(),
        ),
        (
            "garbage".to_string(),
            500,
            "error parsing token: go-jose/go-jose: compact JWS format must have three parts".into(),
        ),
    ];
    for (jwt, status, text) in cases {
        assert_eq!(login(&acl, "m", &jwt), (status, text));
    }
    assert_eq!(
        login(&acl, "nope", &with(json!({}))),
        (403, "ACL not found: auth method \"nope\" not found".into())
    );
    assert_eq!(token_count(&acl), before, "nothing created");

    // Methods and rules that do not check out.
    let refused = |path: &str, body: Value| {
        let (status, _, text) = acl.call("PUT", path, Some(ROOT), Some(&body.to_string()));
        (status, text)
    };
    assert_eq!(
        refused("/v1/acl/binding-rule", json!({"AuthMethod": "m", "Selector": "value.svc ==", "BindType": "service", "BindName": "x"})).0,
        500
    );
    assert!(refused("/v1/acl/binding-rule", json!({"AuthMethod": "m", "Selector": "value.svc ==", "BindType": "service", "BindName": "x"}))
        .1
        .starts_with("invalid Binding Rule: Selector is invalid: "));
    assert_eq!(
        refused("/v1/acl/binding-rule", json!({"AuthMethod": "m", "BindType": "service", "BindName": "${value.nope}"})),
        (500, "Invalid Binding Rule: invalid BindName or BindVars: error interpreting template: unknown variable accessed: value.nope".into())
    );
    assert_eq!(
        refused(
            "/v1/acl/binding-rule",
            json!({"AuthMethod": "m", "BindType": "everything", "BindName": "x"})
        ),
        (
            500,
            "Invalid Binding Rule: unknown BindType \"everything\"".into()
        )
    );
    assert_eq!(
        refused(
            "/v1/acl/auth-method",
            json!({"Name": "k8s", "Type": "kubernetes"})
        ),
        (
            500,
            "Invalid Auth Method: Type should be one of: [jwt]".into()
        )
    );
    assert_eq!(
        refused(
            "/v1/acl/auth-method",
            json!({"Name": "t", "Type": "jwt", "MaxTokenTTL": "48h", "Config": {"JWKSURL": "https://x"}})
        ),
        (
            500,
            "MaxTokenTTL 48h0m0s cannot be more than 24h0m0s".into()
        )
    );
    assert_eq!(
        refused("/v1/acl/auth-method", json!({"Name": "t", "Type": "jwt", "Config": {}})),
        (500, "Invalid Auth Method: exactly one of 'JWTValidationPubKeys', 'JWKSURL', or 'OIDCDiscoveryURL' must be set for type \"jwt\"".into())
    );
    // An unreadable JWKS URL: refused at write.
    let closed = common::free_port();
    let (status, text) = refused(
        "/v1/acl/auth-method",
        json!({"Name": "t", "Type": "jwt", "Config": {"JWKSURL": format!("https://127.0.0.1:{closed}/keys")}}),
    );
    assert_eq!(status, 500);
    assert!(
        text.starts_with(
            "Invalid Auth Method: error checking JWKSURL: fetching keys oidc: get keys failed: "
        ),
        "{text}"
    );
    let (status, _, text) = acl.call("GET", "/v1/acl/auth-method/t", Some(ROOT), None);
    assert_eq!(
        (status, text.as_str()),
        (404, "Requested auth method does not exist: ACL not found")
    );
}

#[test]
fn keys_from_a_jwks_and_from_oidc_discovery_over_https() {
    let certs = tempfile::tempdir().unwrap();
    common::server_tls_config(certs.path(), "vm", "");
    let ca = std::fs::read_to_string(certs.path().join("consul-agent-ca.pem")).unwrap();
    let files = tempfile::tempdir().unwrap();
    let signer = Signer::generate();
    let other = Signer::generate();
    std::fs::write(
        files.path().join("jwks.json"),
        json!({"keys": [other.jwk("k0"), signer.jwk("k1")]}).to_string(),
    )
    .unwrap();
    let port = common::free_port();
    let base = format!("https://localhost:{port}");
    std::fs::create_dir(files.path().join(".well-known")).unwrap();
    std::fs::write(
        files.path().join(".well-known/openid-configuration"),
        json!({"issuer": base, "jwks_uri": format!("{base}/jwks.json")}).to_string(),
    )
    .unwrap();
    // `openssl s_server -WWW` serves the directory's files over HTTPS.
    let mut server = common::openssl_server(certs.path(), port, &["-WWW"], files.path());
    let acl = Acl::start();
    method_with_rules(
        &acl,
        "jwks",
        json!({"JWKSURL": format!("{base}/jwks.json"), "JWKSCACert": ca}),
    );
    let (status, text) = login(
        &acl,
        "jwks",
        &signer.sign(&claims("api", &["ops"]), Some("k1")),
    );
    assert_eq!(status, 200, "{text}");
    // Without the CA the URL is not trusted.
    let (status, _, text) = acl.call(
        "PUT",
        "/v1/acl/auth-method",
        Some(ROOT),
        Some(&json!({"Name": "untrusted", "Type": "jwt", "Config": {"JWKSURL": format!("{base}/jwks.json")}}).to_string()),
    );
    assert_eq!(status, 500);
    assert!(text.contains("error checking JWKSURL"), "{text}");
    // OIDC discovery: the issuer's document names the JWKS; tokens must be
    // the provider's own (`iss`), signed with an allowed algorithm.
    method_with_rules(
        &acl,
        "oidc",
        json!({"OIDCDiscoveryURL": base, "OIDCDiscoveryCACert": ca, "JWTSupportedAlgs": ["ES256"]}),
    );
    let mut provider_claims = claims("api", &["ops"]);
    provider_claims["iss"] = json!(base);
    let (status, text) = login(&acl, "oidc", &signer.sign(&provider_claims, Some("k1")));
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        login(&acl, "oidc", &signer.sign(&claims("api", &["ops"]), Some("k1"))),
        (500, format!("error validating signature: oidc: id token issued by a different provider, expected {base:?} got \"{ISSUER}\""))
    );
    method_with_rules(
        &acl,
        "oidc-rs",
        json!({"OIDCDiscoveryURL": base, "OIDCDiscoveryCACert": ca}),
    );
    assert_eq!(
        login(&acl, "oidc-rs", &signer.sign(&provider_claims, Some("k1"))),
        (500, "error validating signature: oidc: id token signed with unsupported algorithm, expected [\"RS256\"] got \"ES256\"".into())
    );
    // A `kid` the JWKS does not hold is no key at all.
    assert_eq!(
        login(
            &acl,
            "jwks",
            &signer.sign(&claims("api", &["ops"]), Some("k9"))
        ),
        (
            500,
            "error verifying token: failed to verify id token signature".into()
        )
    );
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn the_cli_makes_methods_and_rules_and_logs_in_and_out() {
    let acl = Acl::start();
    let dir = tempfile::tempdir().unwrap();
    let signer = Signer::generate();
    let config = json!({"JWTValidationPubKeys": [signer.public_pem()], "BoundIssuer": ISSUER,
        "BoundAudiences": ["consul"], "ClaimMappings": {"service": "svc"}});
    let config_file = common::write(dir.path(), "config.json", &config.to_string());
    let (code, out, err) = acl.cli_as_root(&[
        "acl",
        "auth-method",
        "create",
        "-type",
        "jwt",
        "-name",
        "cli-jwt",
        "-max-token-ttl",
        "5m",
        "-description",
        "from the CLI",
        "-config",
        &format!("@{}", config_file.display()),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("Name:          cli-jwt\nType:          jwt\nDescription:   from the CLI\nMaxTokenTTL:   5m0s\nConfig:\n{"),
        "{out}"
    );
    let (code, out, err) = acl.cli_as_root(&[
        "acl",
        "binding-rule",
        "create",
        "-method",
        "cli-jwt",
        "-bind-type",
        "service",
        "-bind-name",
        "${value.svc}",
        "-selector",
        "value.svc != \"\"",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("AuthMethod:   cli-jwt\n") && out.contains("BindName:     ${value.svc}\n"),
        "{out}"
    );
    let id = out
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("ID:")
        .trim()
        .to_string();
    // A prefix of the ID names the rule.
    let (code, out, _) = acl.cli_as_root(&["acl", "binding-rule", "read", "-id", &id[..8]]);
    assert_eq!(code, Some(0));
    assert!(out.contains(&id));
    let (_, out, _) = acl.cli_as_root(&["acl", "auth-method", "list"]);
    assert_eq!(
        out,
        "cli-jwt:\n   Type:         jwt\n   Description:  from the CLI\n"
    );

    // Login writes the SecretID alone to the sink, mode 0600.
    let jwt = common::write(dir.path(), "jwt", &signer.sign(&claims("api", &[]), None));
    let sink = dir.path().join("token");
    let out = acl.agent.cli(&[
        "login",
        "-method",
        "cli-jwt",
        "-bearer-token-file",
        jwt.to_str().unwrap(),
        "-token-sink-file",
        sink.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let secret = std::fs::read_to_string(&sink).unwrap();
    let me = acl.json("GET", "/v1/acl/token/self", &secret, None);
    assert_eq!(me["ServiceIdentities"], json!([{"ServiceName": "api"}]));
    let out = acl.agent.cli(&["logout", "-token", &secret]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, _, _) = acl.call("GET", "/v1/acl/token/self", Some(&secret), None);
    assert_ne!(status, 200, "logged out");
    // Bad runs: Consul's texts.
    let empty = common::write(dir.path(), "empty", "  \n");
    for (args, text) in [
        (vec!["login", "-method", "cli-jwt", "-token-sink-file", "/tmp/x"], "Missing required '-bearer-token-file' flag".to_string()),
        (
            vec!["login", "-method", "cli-jwt", "-bearer-token-file", empty.to_str().unwrap(), "-token-sink-file", "/tmp/x"],
            format!("No bearer token found in {}", empty.display()),
        ),
        (
            vec!["login", "-method", "nope", "-bearer-token-file", jwt.to_str().unwrap(), "-token-sink-file", "/tmp/x"],
            "Error logging in: Unexpected response code: 403 (ACL not found: auth method \"nope\" not found)".to_string(),
        ),
        (vec!["acl", "auth-method", "read"], "Must specify the -name parameter".to_string()),
    ] {
        let out = acl.agent.cli(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&text), "{args:?}: {err}");
    }
    let (code, out, _) = acl.cli_as_root(&["acl", "auth-method", "delete", "-name", "cli-jwt"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "Auth method \"cli-jwt\" deleted successfully\n")
    );
}

#[test]
fn an_identity_holds_at_most_the_configured_live_tokens() {
    let acl = Acl::start_with("login_tokens_per_identity = 2", &[]);
    let signer = Signer::generate();
    method_with_rules(
        &acl,
        "capped",
        json!({"JWTValidationPubKeys": [signer.public_pem()]}),
    );
    let jwt = signer.sign(&claims("web", &["ops"]), None);
    let mut secrets = Vec::new();
    for _ in 0..2 {
        let (status, text) = login(&acl, "capped", &jwt);
        assert_eq!(status, 200, "{text}");
        let token: Value = serde_json::from_str(&text).unwrap();
        secrets.push(token["SecretID"].as_str().unwrap().to_string());
    }
    let before = token_count(&acl);
    let (status, text) = login(&acl, "capped", &jwt);
    assert_eq!(status, 500);
    assert!(
        text.starts_with(
            "this identity already holds 2 live tokens from auth method \"capped\" (at most 2)"
        ),
        "{text}"
    );
    assert_eq!(token_count(&acl), before, "nothing created");
    // Another identity is not held back; a logout makes room again.
    let (status, _) = login(&acl, "capped", &signer.sign(&claims("api", &["ops"]), None));
    assert_eq!(status, 200);
    let (status, _, _) = acl.call("POST", "/v1/acl/logout", Some(&secrets[0]), None);
    assert_eq!(status, 200);
    assert_eq!(login(&acl, "capped", &jwt).0, 200);
}

/// The header `name` of a response.
fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

#[test]
fn a_login_token_expires_with_its_method_ttl_and_is_reaped() {
    let acl = Acl::start();
    let signer = Signer::generate();
    acl.json(
        "PUT",
        "/v1/acl/auth-method",
        ROOT,
        Some(
            &json!({"Name": "short", "Type": "jwt", "MaxTokenTTL": "1m",
                "Config": {"JWTValidationPubKeys": [signer.public_pem()],
                    "BoundAudiences": ["consul"]}})
            .to_string(),
        ),
    );
    acl.json(
        "PUT",
        "/v1/acl/binding-rule",
        ROOT,
        Some(r#"{"AuthMethod": "short", "BindType": "service", "BindName": "web"}"#),
    );
    let (status, text) = login(&acl, "short", &signer.sign(&claims("web", &[]), None));
    assert_eq!(status, 200, "{text}");
    let token: Value = serde_json::from_str(&text).unwrap();
    let secret = token["SecretID"].as_str().unwrap();
    let accessor = token["AccessorID"].as_str().unwrap();
    let expires = humantime::parse_rfc3339(token["ExpirationTime"].as_str().unwrap()).unwrap();
    let (status, _, _) = acl.call("GET", "/v1/acl/token/self", Some(secret), None);
    assert_eq!(status, 200);
    let (_, headers, listed) = acl.call("GET", "/v1/acl/tokens", Some(ROOT), None);
    assert!(listed.contains(accessor));
    let index: u64 = header(&headers, "X-Consul-Index").parse().unwrap();

    // Refused from the moment it expires.
    let wait = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    std::thread::sleep(wait + Duration::from_millis(200));
    let (status, _, text) = acl.call("GET", "/v1/acl/token/self", Some(secret), None);
    assert_eq!((status, text.as_str()), (403, "ACL not found"));
    // And its row goes: the reaper's delete moves the tokens' index.
    let (status, headers, listed) = acl.call(
        "GET",
        &format!("/v1/acl/tokens?index={index}&wait=10s"),
        Some(ROOT),
        None,
    );
    assert_eq!(status, 200);
    assert!(!listed.contains(accessor), "{listed}");
    let after: u64 = header(&headers, "X-Consul-Index").parse().unwrap();
    assert!(after > index, "{after} after {index}: no reaping write");
}
