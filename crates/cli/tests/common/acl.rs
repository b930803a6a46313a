//! A dev agent with ACLs on and `default_policy = "deny"`, its management
//! token, and requests made with a chosen token.

use std::time::Duration;

use serde_json::Value;

use super::{eventually, http_request_full, try_http_request_full, TestAgent};

/// The initial management token's secret.
pub const ROOT: &str = "8f2b5c1e-4a7d-4c3e-9b1a-2d6e7f8a9b0c";

/// A request to the agent on `http_port` with `token` in
/// `X-Consul-Token`: status and body (`None` when nothing answers).
pub fn try_call_with_token(
    http_port: u16,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> Option<(u16, String)> {
    let headers = [("X-Consul-Token", token)];
    let (status, _, body) = try_http_request_full(
        http_port,
        method,
        path,
        &headers,
        body.map(|b| b.as_bytes().to_vec()),
    )?;
    Some((status, String::from_utf8_lossy(&body).to_string()))
}

/// A dev agent denying by default.
pub struct Acl {
    pub agent: TestAgent,
}

impl Acl {
    /// Started with the management token [`ROOT`] only.
    pub fn start() -> Acl {
        Acl::start_with("", &[])
    }

    /// Started with `acl_extra` inside the `acl {}` block (beside
    /// `enabled`, `default_policy` and `tokens`) and more agent `flags`;
    /// returns once the management token is ready.
    pub fn start_with(acl_extra: &str, flags: &[&str]) -> Acl {
        Acl::start_full(acl_extra, "", flags)
    }

    /// [`Acl::start_with`] with more `tokens {}` entries too.
    pub fn start_full(acl_extra: &str, tokens_extra: &str, flags: &[&str]) -> Acl {
        let hcl = format!(
            "acl {{ enabled = true default_policy = \"deny\" {acl_extra} tokens {{ initial_management = \"{ROOT}\" {tokens_extra} }} }}"
        );
        let mut args = vec!["-dev".to_string(), format!("-hcl={hcl}")];
        args.extend(flags.iter().map(|f| f.to_string()));
        let disable_other_ports = !flags
            .iter()
            .any(|f| f.starts_with("-dns-port") || f.starts_with("-grpc-port"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let agent = TestAgent::spawn(&args, disable_other_ports);
        let acl = Acl { agent };
        eventually(Duration::from_secs(30), || {
            let headers = [("X-Consul-Token", ROOT)];
            let (status, _, _) = try_http_request_full(
                acl.agent.http_port,
                "GET",
                "/v1/acl/token/self",
                &headers,
                None,
            )?;
            (status == 200).then_some(())
        });
        acl
    }

    /// A request with `token` (none when `None`): status, headers, body.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Vec<(String, String)>, String) {
        let headers: Vec<(&str, &str)> = token.map(|t| ("X-Consul-Token", t)).into_iter().collect();
        http_request_full(self.agent.http_port, method, path, &headers, body)
    }

    /// A request that must answer 200, its body as JSON.
    pub fn json(&self, method: &str, path: &str, token: &str, body: Option<&str>) -> Value {
        let (status, _, text) = self.call(method, path, Some(token), body);
        assert_eq!(status, 200, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
    }

    /// Runs the CLI with `-token` set to the management token: its exit
    /// code, standard output and standard error.
    pub fn cli_as_root(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["-token", ROOT]);
        let out = self.agent.cli(&full);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// A new token holding one new policy with `rules`; its secret.
    pub fn token_with_rules(&self, name: &str, rules: &str) -> String {
        let body = serde_json::json!({"Name": name, "Rules": rules}).to_string();
        self.json("PUT", "/v1/acl/policy", ROOT, Some(&body));
        let body = serde_json::json!({"Policies": [{"Name": name}]}).to_string();
        let token = self.json("PUT", "/v1/acl/token", ROOT, Some(&body));
        token["SecretID"].as_str().unwrap().to_string()
    }
}
