//! `--http ADDR`: MCP over streamable HTTP at `/mcp`. Every request carries its agent's own login as a
//! bearer, `Authorization: Bearer <agent>:<token>` (the token CREATE AGENT printed is the role's
//! password), checked by logging in to Postgres as that agent: a wrong or missing token is a 401 before
//! any tool runs, and each tool call then runs as that agent. The server keeps no credentials of its own.
//! `X-Worlds-Safe: on` puts one request in safe mode; nothing a request sends can take a server started
//! with --safe out of it.
use crate::db::Pool;
use crate::tools::{Bearer, Worlds};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

/// `<agent>:<token>` from an Authorization header (agent names hold no ':').
pub fn bearer_of(headers: &HeaderMap) -> Result<(String, String), &'static str> {
    let value = headers.get(header::AUTHORIZATION).ok_or("missing Authorization: Bearer <agent>:<token>")?;
    let value = value.to_str().map_err(|_| "the Authorization header is not text")?;
    let (scheme, rest) = value.split_once(' ').ok_or("expected Authorization: Bearer <agent>:<token>")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("expected a Bearer token: Authorization: Bearer <agent>:<token>");
    }
    let (user, token) = rest.trim().split_once(':').ok_or("the bearer must be <agent>:<token>")?;
    if user.is_empty() || token.is_empty() || user.len() > 63 || token.len() > 1024 {
        return Err("the bearer must be <agent>:<token>");
    }
    Ok((user.to_string(), token.to_string()))
}

fn safe_header(headers: &HeaderMap) -> bool {
    headers
        .get("x-worlds-safe")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "on" | "true" | "1" | "yes"))
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": message}).to_string();
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer realm=\"worlds-mcp\""));
    }
    r
}

async fn authenticate(State(pool): State<Arc<Pool>>, mut req: Request, next: Next) -> Response {
    let (user, password) = match bearer_of(req.headers()) {
        Ok(b) => b,
        Err(m) => return refuse(StatusCode::UNAUTHORIZED, m),
    };
    let config = pool.target.as_login(&user, &password);
    match pool.checkout(&config).await {
        Ok(conn) => pool.put_back_unused(conn),
        Err(e) if e.is_auth() => return refuse(StatusCode::UNAUTHORIZED, &format!("Postgres refused the login of {user}: {}", e.message)),
        Err(e) => return refuse(StatusCode::SERVICE_UNAVAILABLE, &format!("{} ({})", e.message, e.sqlstate)),
    }
    let safe = safe_header(req.headers());
    req.extensions_mut().insert(Bearer { user, password, safe });
    next.run(req).await
}

pub async fn serve(addr: &str, worlds: Worlds, allowed_hosts: Vec<String>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into(), local.ip().to_string()];
    hosts.extend(allowed_hosts);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(1 << 20);
    let pool = worlds.pool.clone();
    let service = StreamableHttpService::new(move || Ok(worlds.clone()), Arc::new(NeverSessionManager::default()), config);
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(pool, authenticate));
    eprintln!("worlds-mcp: serving MCP over HTTP at http://{local}/mcp");
    axum::serve(listener, app).with_graceful_shutdown(async { let _ = tokio::signal::ctrl_c().await; }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::AUTHORIZATION, v.parse().unwrap());
        m
    }

    #[test]
    fn bearer_names_its_agent() {
        assert_eq!(bearer_of(&h("Bearer bot:wt_abc")).unwrap(), ("bot".into(), "wt_abc".into()));
        assert_eq!(bearer_of(&h("bearer bot:a:b")).unwrap(), ("bot".into(), "a:b".into()));
        assert!(bearer_of(&HeaderMap::new()).is_err());
        assert!(bearer_of(&h("Basic Ym90OnB3")).is_err());
        assert!(bearer_of(&h("Bearer wt_abc")).is_err());
        assert!(bearer_of(&h("Bearer :x")).is_err());
        assert!(bearer_of(&h("Bearer bot:")).is_err());
    }
}
