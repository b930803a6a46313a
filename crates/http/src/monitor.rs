//! `GET /v1/agent/monitor?loglevel=&logjson`: the agent's log as it is
//! written, one line per event (hclog's text or JSON form), flushed as it
//! comes, until the client goes away. Needs `agent:read`; an unknown
//! level is Consul's 400 before anything streams.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use legate_acl::Access;
use legate_agent::log_stream::{parse_level, Follower};

use crate::agent_acl::check_agent;
use crate::util::{ApiError, ApiResult};
use crate::{AppState, Req};

pub async fn monitor(State(st): State<AppState>, req: Req) -> ApiResult {
    check_agent(&st, &req, Access::Read).await?;
    let asked = match req.params.get("loglevel") {
        None | Some("") => "INFO",
        Some(level) => level,
    };
    let level = parse_level(asked)
        .ok_or_else(|| ApiError::bad_request(format!("Unknown log level: {asked}")))?;
    let json = req.params.has("logjson");
    let follower = Follower::start(level);
    let lines = futures::stream::unfold(follower, move |mut follower| async move {
        let line = match follower.next().await {
            Ok(line) if json => format!("{}\n", line.json),
            Ok(line) => format!("{}\n", line.text),
            Err(dropped) => format!(
                "{} [WARN]  agent: Monitor dropped {dropped} logs during monitor request\n",
                legate_agent::log_stream::now_stamp()
            ),
        };
        Some((Ok::<_, std::io::Error>(line.into_bytes()), follower))
    });
    Ok(streaming(Body::from_stream(lines)))
}

fn streaming(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    response
}
