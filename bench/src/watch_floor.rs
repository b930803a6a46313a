//! The floor of the watcher wake on this machine: a bare server that
//! speaks only what a watch round sends (`PUT /v1/kv/watched`, and `GET
//! /v1/kv/watched` with or without `?index=`), holds each blocking GET
//! until the key's index passes the one asked for, and then writes one
//! answer encoded once per index and shared by every waiter, the same
//! bytes Legate would send. No HTTP library, no routing, no store: what
//! is left is the tokio wake and one `send` per watcher.
//!
//! Run against it with `legate-bench watch --target legate`; the gap
//! between its figures and the agent's is what Legate's own layers cost.

use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The largest request head read; anything longer closes the connection.
const MAX_HEAD: usize = 8192;

/// The key's current index and its answer, encoded once.
#[derive(Clone)]
struct Current {
    index: u64,
    answer: Bytes,
}

impl Current {
    fn at(index: u64, value: &[u8]) -> Current {
        let body = format!(
            r#"[{{"LockIndex":0,"Key":"watched","Flags":0,"Value":"{}","CreateIndex":1,"ModifyIndex":{index}}}]"#,
            crate::b64(&String::from_utf8_lossy(value))
        );
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-consul-index: {index}\r\n\
             x-consul-knownleader: true\r\nx-consul-lastcontact: 0\r\n\
             x-consul-effective-consistency: leader\r\nx-consul-default-acl-policy: allow\r\n\
             content-length: {}\r\ndate: Sat, 05 Dec 2026 12:00:00 GMT\r\n\r\n{body}",
            body.len()
        );
        Current {
            index,
            answer: Bytes::from(answer),
        }
    }
}

/// Serves on `127.0.0.1:port` until killed.
pub async fn serve(port: u16) -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let (key, _) = watch::channel(Current::at(1, b""));
    let key = Arc::new(key);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let key = key.clone();
        tokio::spawn(async move {
            let _ = connection(stream, key).await;
        });
    }
}

/// One request: its head, and the body's bytes (a PUT's value).
struct Request {
    put: bool,
    min_index: u64,
    body: Vec<u8>,
}

async fn connection(mut stream: TcpStream, key: Arc<watch::Sender<Current>>) -> Result<()> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let Some(request) = read_request(&mut stream, &mut buf).await? else {
            return Ok(());
        };
        let answer = if request.put {
            let index = key.borrow().index + 1;
            key.send_replace(Current::at(index, &request.body));
            Bytes::from(format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4\r\nx-consul-index: {index}\r\n\r\ntrue"
            ))
        } else {
            let mut changes = key.subscribe();
            let current = changes
                .wait_for(|current| current.index > request.min_index)
                .await?;
            current.answer.clone()
        };
        stream.write_all(&answer).await?;
    }
}

/// Reads one request from `stream` (`None` at a clean end).
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Option<Request>> {
    let mut chunk = [0u8; 1024];
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD {
            anyhow::bail!("request head too long");
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < end + 4 + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[end + 4..end + 4 + length].to_vec();
    buf.drain(..end + 4 + length);
    let min_index = head
        .split_once("index=")
        .and_then(|(_, rest)| rest.split(['&', ' ']).next())
        .and_then(|index| index.parse().ok())
        .unwrap_or(0);
    Ok(Some(Request {
        put: head.starts_with("PUT "),
        min_index,
        body,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_blocked_get_is_answered_by_the_next_put() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        tokio::spawn(serve(port));
        let connect = || async {
            for _ in 0..100 {
                if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)).await {
                    return stream;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            panic!("the floor server did not start");
        };
        let mut watcher = connect().await;
        watcher
            .write_all(b"GET /v1/kv/watched?index=1&wait=60s HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut writer = connect().await;
        writer
            .write_all(b"PUT /v1/kv/watched HTTP/1.1\r\nContent-Length: 1\r\n\r\n7")
            .await
            .unwrap();
        let mut answer = vec![0u8; 1024];
        let n = watcher.read(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.contains("x-consul-index: 2\r\n"), "{answer}");
        assert!(answer.contains(r#""Value":"Nw==""#), "{answer}");
    }
}
