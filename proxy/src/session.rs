//! One client's connection: its startup (TLS, cancel requests, the database name choosing the world),
//! authentication relayed to the server unchanged, then the two directions relayed message by message,
//! with the spec's statements rewritten (intercept.rs). Memory per connection is bounded: a message is
//! read whole only when it is rewritten or looked into (a client's at most --max-message-bytes); COPY data
//! and rows stream through.
use bytes::{Buf, Bytes, BytesMut};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::intercept::{Out, Tracker};
use crate::upstream::{self, Target};
use crate::{cancel, wire, Config};

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;

/// How long a client has to send its startup packet, and to finish authenticating (as Postgres's
/// authentication_timeout).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// A server's message read whole (a command tag, the tag row of a spec statement) is at most this.
const MAX_WHOLE_SERVER: usize = 64 << 20;
const CHUNK: usize = 16 << 10;

/// A connection's failure, for the log.
type Result<T> = std::result::Result<T, String>;

fn io_err(what: &str) -> impl Fn(io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Reads until `buf` holds at least `n` bytes; false at end of stream.
async fn fill<R: AsyncRead + Unpin + ?Sized>(r: &mut R, buf: &mut BytesMut, n: usize) -> io::Result<bool> {
    while buf.len() < n {
        buf.reserve((n - buf.len()).clamp(CHUNK, 1 << 20));
        if r.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One whole message (type, length, body) from `r`, its length at most `max`; None at end of stream.
async fn read_message<R: AsyncRead + Unpin + ?Sized>(r: &mut R, buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>> {
    if !fill(r, buf, 5).await.map_err(io_err("read"))? {
        return Ok(None);
    }
    let len = wire::check_length(u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]), max)?;
    if !fill(r, buf, 1 + len).await.map_err(io_err("read"))? {
        return Ok(None);
    }
    Ok(Some(buf.split_to(1 + len).freeze()))
}

/// Sends the client a FATAL error (best effort) and ends.
async fn refuse<W: AsyncWrite + Unpin + ?Sized>(w: &mut W, code: &str, msg: &str) -> Result<()> {
    let _ = w.write_all(&wire::error_response("FATAL", code, msg, None)).await;
    let _ = w.flush().await;
    Err(msg.to_string())
}

pub async fn serve(socket: tokio::net::TcpStream, config: &Config) -> Result<()> {
    let _ = socket.set_nodelay(true);
    let mut client: Stream = Box::new(socket);
    let mut buf = BytesMut::with_capacity(1024);
    // SSLRequest / GSSENCRequest first, then the startup packet (or a CancelRequest)
    let mut tls_done = false;
    let (version, body) = loop {
        let packet = tokio::time::timeout(STARTUP_TIMEOUT, read_startup(&mut client, &mut buf))
            .await
            .map_err(|_| "timed out waiting for the startup packet".to_string())??;
        let Some((version, body)) = packet else { return Ok(()) };
        match version {
            wire::SSL_REQUEST if !tls_done => {
                if !buf.is_empty() {
                    return refuse(&mut client, "08P01", "received unencrypted data after SSL request").await;
                }
                tls_done = true;
                match &config.tls {
                    Some(acceptor) => {
                        client.write_all(b"S").await.map_err(io_err("write"))?;
                        let tls = tokio::time::timeout(STARTUP_TIMEOUT, acceptor.accept(client))
                            .await
                            .map_err(|_| "timed out in the TLS handshake".to_string())?
                            .map_err(io_err("TLS handshake"))?;
                        client = Box::new(tls);
                    }
                    None => client.write_all(b"N").await.map_err(io_err("write"))?,
                }
            }
            wire::GSSENC_REQUEST => client.write_all(b"N").await.map_err(io_err("write"))?,
            wire::CANCEL_REQUEST => return forward_cancel(&body, config).await,
            v if v & 0xffff_0000 == wire::PROTOCOL_3 => break (v, body),
            v => return refuse(&mut client, "0A000", &format!("unsupported frontend protocol {}.{}", v >> 16, v & 0xffff)).await,
        }
    };
    let Some(params) = wire::startup_params(&body) else {
        return refuse(&mut client, "08P01", "invalid startup packet layout").await;
    };
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let database = get("database").or_else(|| get("user")).unwrap_or_default();
    let target = upstream::target(&database, &config.upstream.dbname);
    let mut server = match connect(config).await {
        Ok(s) => s,
        Err(e) => return refuse(&mut client, "08006", &format!("worlds-proxy could not reach the server: {e}")).await,
    };
    let startup = wire::startup_packet(version, &upstream::upstream_params(&params, &config.upstream.dbname, &target));
    server.write_all(&startup).await.map_err(io_err("write to the server"))?;

    let mut sbuf = BytesMut::with_capacity(CHUNK);
    let registered = tokio::time::timeout(STARTUP_TIMEOUT, authenticate(&mut client, &mut buf, &mut server, &mut sbuf, config, &target, &database))
        .await
        .map_err(|_| "timed out authenticating".to_string())??;
    let Some(_registered) = registered else { return Ok(()) };
    relay(client, buf, server, sbuf, config.max_message).await
}

/// The startup packet (version, body after it); None when the client left.
async fn read_startup(s: &mut Stream, buf: &mut BytesMut) -> Result<Option<(u32, Bytes)>> {
    if !fill(s, buf, 4).await.map_err(io_err("read"))? {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if !(8..=wire::MAX_STARTUP).contains(&len) {
        return refuse(s, "08P01", "invalid length of startup packet").await.map(|_| None);
    }
    if !fill(s, buf, len).await.map_err(io_err("read"))? {
        return Ok(None);
    }
    let packet = buf.split_to(len).freeze();
    let version = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
    Ok(Some((version, packet.slice(8..))))
}

async fn connect(config: &Config) -> io::Result<Stream> {
    let up = &config.upstream;
    let mut s: Stream = match up.unix_path() {
        Some(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
        None => {
            let s = tokio::net::TcpStream::connect((up.host.as_str(), up.port)).await?;
            let _ = s.set_nodelay(true);
            Box::new(s)
        }
    };
    if let Some(connector) = &config.upstream_tls {
        let mut request = Vec::with_capacity(8);
        request.extend_from_slice(&8u32.to_be_bytes());
        request.extend_from_slice(&wire::SSL_REQUEST.to_be_bytes());
        s.write_all(&request).await?;
        let mut answer = [0u8; 1];
        s.read_exact(&mut answer).await?;
        match answer[0] {
            b'S' => return Ok(Box::new(connector.connect(crate::tls::server_name(&up.host), s).await?)),
            _ if up.sslmode == upstream::SslMode::Prefer => {}
            _ => return Err(io::Error::other("the server does not support SSL, but sslmode=require")),
        }
    }
    Ok(s)
}

/// Relays authentication (the server's requests to the client, the client's answers back), then the
/// server's parameters and a BackendKeyData of the proxy's own. For a world, checks that it exists before
/// the client gets ReadyForQuery. None when the connection ended there (refused, or the client left).
async fn authenticate(
    client: &mut Stream,
    cbuf: &mut BytesMut,
    server: &mut Stream,
    sbuf: &mut BytesMut,
    config: &Config,
    target: &Target,
    database: &str,
) -> Result<Option<cancel::Registered>> {
    let mut registered = None;
    loop {
        let Some(m) = read_message(server, sbuf, MAX_WHOLE_SERVER).await? else { return Ok(None) };
        match m[0] {
            b'R' => {
                let code = if m.len() >= 9 { i32::from_be_bytes([m[5], m[6], m[7], m[8]]) } else { -1 };
                // SASL's mechanisms without the channel-bound ones (-PLUS): a server reached over TLS offers
                // them, but the client's TLS (if any) ends at the proxy, so its binding could never match
                let m = if code == 10 { wire::sasl_without_plus(&m) } else { m };
                client.write_all(&m).await.map_err(io_err("write to the client"))?;
                // cleartext, md5, GSS, GSS continue, SSPI, SASL, SASL continue: the client answers
                if matches!(code, 3 | 5 | 7 | 8 | 9 | 10 | 11) {
                    let Some(answer) = read_message(client, cbuf, config.max_message.min(1 << 20)).await? else { return Ok(None) };
                    server.write_all(&answer).await.map_err(io_err("write to the server"))?;
                }
            }
            b'K' if m.len() >= 13 => {
                let real = (i32::from_be_bytes([m[5], m[6], m[7], m[8]]), i32::from_be_bytes([m[9], m[10], m[11], m[12]]));
                let r = cancel::register(real);
                let mut body = Vec::with_capacity(8);
                body.extend_from_slice(&r.key.0.to_be_bytes());
                body.extend_from_slice(&r.key.1.to_be_bytes());
                client.write_all(&wire::message(b'K', &body)).await.map_err(io_err("write to the client"))?;
                registered = Some(r);
            }
            b'E' => {
                client.write_all(&m).await.map_err(io_err("write to the client"))?;
                return Ok(None);
            }
            b'Z' => {
                if let Target::World(world) = target {
                    if !world_exists(client, server, sbuf, world, database).await? {
                        return Ok(None);
                    }
                }
                client.write_all(&m).await.map_err(io_err("write to the client"))?;
                client.flush().await.map_err(io_err("write to the client"))?;
                return Ok(Some(registered.unwrap_or_else(|| cancel::register((0, 0)))));
            }
            _ => client.write_all(&m).await.map_err(io_err("write to the client"))?,
        }
    }
}

/// The session's world (from the database name) is resolved by the server as SWITCH WORLD resolves one:
/// a world that doesn't exist fails the connection with 3D000, as Postgres fails an unknown database.
async fn world_exists(client: &mut Stream, server: &mut Stream, sbuf: &mut BytesMut, world: &str, database: &str) -> Result<bool> {
    server
        .write_all(&wire::query_message("select worlds.switch_world(current_setting('worlds.world'))"))
        .await
        .map_err(io_err("write to the server"))?;
    let mut failure = None;
    loop {
        let Some(m) = read_message(server, sbuf, MAX_WHOLE_SERVER).await? else { return Ok(false) };
        match m[0] {
            b'E' => failure = Some(wire::error_fields(&m[5..])),
            b'Z' => break,
            _ => {}
        }
    }
    let Some(fields) = failure else { return Ok(true) };
    let field = |c: u8| fields.iter().find(|(k, _)| *k == c).map(|(_, v)| v.as_str());
    let code = field(b'C').unwrap_or("XX000");
    let message = field(b'M').unwrap_or("");
    let error = if code == "3D000" {
        wire::error_response("FATAL", "3D000", &format!("database \"{database}\" does not exist"), Some(message))
    } else {
        wire::error_response("FATAL", code, &format!("world \"{world}\": {message}"), field(b'D'))
    };
    let _ = client.write_all(&error).await;
    let _ = client.flush().await;
    Ok(false)
}

async fn forward_cancel(body: &[u8], config: &Config) -> Result<()> {
    if body.len() != 8 {
        return Ok(());
    }
    let key = (i32::from_be_bytes([body[0], body[1], body[2], body[3]]), i32::from_be_bytes([body[4], body[5], body[6], body[7]]));
    let Some((pid, secret)) = cancel::lookup(key) else { return Ok(()) };
    let up = &config.upstream;
    let mut packet = Vec::with_capacity(16);
    packet.extend_from_slice(&16u32.to_be_bytes());
    packet.extend_from_slice(&wire::CANCEL_REQUEST.to_be_bytes());
    packet.extend_from_slice(&pid.to_be_bytes());
    packet.extend_from_slice(&secret.to_be_bytes());
    let mut s: Stream = match up.unix_path() {
        Some(path) => Box::new(tokio::net::UnixStream::connect(path).await.map_err(io_err("cancel"))?),
        None => Box::new(tokio::net::TcpStream::connect((up.host.as_str(), up.port)).await.map_err(io_err("cancel"))?),
    };
    s.write_all(&packet).await.map_err(io_err("cancel"))?;
    // the server closes the connection once it has read the request
    let mut sink = [0u8; 16];
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut sink)).await;
    Ok(())
}

/// The two directions, until either ends.
async fn relay(client: Stream, cbuf: BytesMut, server: Stream, sbuf: BytesMut, max: usize) -> Result<()> {
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut sr, mut sw) = tokio::io::split(server);
    let tracker = Arc::new(Mutex::new(Tracker::default()));
    let outcome = tokio::select! {
        r = client_to_server(&mut cr, cbuf, &mut sw, &tracker, max) => r,
        r = server_to_client(&mut sr, sbuf, &mut cw, &tracker) => r.map(|_| ()),
    };
    if let Err(e) = &outcome {
        if let Some(msg) = e.strip_prefix("bad input: ") {
            let _ = cw.write_all(&wire::error_response("FATAL", "08P01", msg, None)).await;
            let _ = cw.flush().await;
            // the server's session ends with the client's: say so, as a client would
            let _ = sw.write_all(&wire::message(b'X', &[])).await;
        }
    }
    outcome
}

async fn flush<W: AsyncWrite + Unpin + ?Sized>(w: &mut W, out: &mut BytesMut) -> io::Result<()> {
    if !out.is_empty() {
        w.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// Until `buf` holds `n` bytes: what's gathered in `out` is written first (never held while waiting).
async fn need<R, W>(r: &mut R, buf: &mut BytesMut, n: usize, w: &mut W, out: &mut BytesMut) -> io::Result<bool>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    if buf.len() >= n {
        return Ok(true);
    }
    flush(w, out).await?;
    if buf.is_empty() && buf.capacity() > (1 << 20) {
        *buf = BytesMut::with_capacity(CHUNK); // (after a large message: don't keep its buffer)
    }
    fill(r, buf, n).await
}

/// Moves the next `total` bytes on (to `out` when `emit`), reading as they come: a message of any size
/// passes in bounded memory.
async fn pass<R, W>(r: &mut R, buf: &mut BytesMut, mut total: usize, emit: bool, w: &mut W, out: &mut BytesMut) -> io::Result<bool>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    loop {
        let n = total.min(buf.len());
        if emit {
            out.extend_from_slice(&buf[..n]);
        }
        buf.advance(n);
        total -= n;
        if total == 0 {
            return Ok(true);
        }
        flush(w, out).await?;
        buf.reserve(total.min(1 << 20).max(CHUNK));
        if r.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
}

async fn client_to_server<R, W>(r: &mut R, mut buf: BytesMut, w: &mut W, tracker: &Mutex<Tracker>, max: usize) -> Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut out = BytesMut::with_capacity(CHUNK);
    let e = io_err("client to server");
    loop {
        if !need(r, &mut buf, 5, w, &mut out).await.map_err(&e)? {
            return Ok(());
        }
        let tag = buf[0];
        // (as Postgres, a type it doesn't know is refused before its length is believed)
        if !wire::FRONTEND_TYPES.contains(&tag) {
            return Err(format!("bad input: invalid frontend message type {tag}"));
        }
        let len = wire::check_length(u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]), max).map_err(|m| format!("bad input: {m}"))?;
        if tag == b'd' {
            // COPY data: streamed
            if !pass(r, &mut buf, 1 + len, true, w, &mut out).await.map_err(&e)? {
                return Ok(());
            }
        } else {
            if !need(r, &mut buf, 1 + len, w, &mut out).await.map_err(&e)? {
                return Ok(());
            }
            let m = buf.split_to(1 + len);
            let action = tracker.lock().unwrap_or_else(|p| p.into_inner()).client(tag, &m[5..]);
            match action {
                Out::Same => out.extend_from_slice(&m),
                Out::Replace(new) => out.extend_from_slice(&new),
                Out::Drop => {}
            }
            if tag == b'X' {
                flush(w, &mut out).await.map_err(&e)?;
                return Ok(());
            }
        }
        if out.len() >= CHUNK {
            flush(w, &mut out).await.map_err(&e)?;
        }
    }
}

async fn server_to_client<R, W>(r: &mut R, mut buf: BytesMut, w: &mut W, tracker: &Mutex<Tracker>) -> Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut out = BytesMut::with_capacity(CHUNK);
    let e = io_err("server to client");
    loop {
        if !need(r, &mut buf, 5, w, &mut out).await.map_err(&e)? {
            flush(w, &mut out).await.map_err(&e)?;
            return Ok(());
        }
        let tag = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len < 4 {
            return Err(format!("the server sent a message of length {len}"));
        }
        let tracked = matches!(tag, b'T' | b'n' | b'D' | b'C' | b'I' | b's' | b'E' | b'Z');
        let whole = tracked && tracker.lock().unwrap_or_else(|p| p.into_inner()).wants_body(tag);
        if whole {
            if len > MAX_WHOLE_SERVER {
                return Err(format!("the server's message of {len} bytes is too long to rewrite"));
            }
            if !need(r, &mut buf, 1 + len, w, &mut out).await.map_err(&e)? {
                return Ok(());
            }
            let m = buf.split_to(1 + len);
            let action = tracker.lock().unwrap_or_else(|p| p.into_inner()).server(tag, &m[5..]);
            match action {
                Out::Same => out.extend_from_slice(&m),
                Out::Replace(new) => out.extend_from_slice(&new),
                Out::Drop => {}
            }
        } else {
            let action = if tracked { tracker.lock().unwrap_or_else(|p| p.into_inner()).server(tag, &[]) } else { Out::Same };
            let emit = match action {
                Out::Same => true,
                Out::Drop => false,
                Out::Replace(new) => {
                    out.extend_from_slice(&new);
                    false
                }
            };
            if !pass(r, &mut buf, 1 + len, emit, w, &mut out).await.map_err(&e)? {
                return Ok(());
            }
        }
        // ReadyForQuery, or enough gathered: out to the client now
        if tag == b'Z' || out.len() >= CHUNK || buf.is_empty() {
            flush(w, &mut out).await.map_err(&e)?;
        }
    }
}
