//! The wire protocol's pieces the proxy reads and writes (by hand: a message is a type byte, a length
//! that counts itself, and a body; the startup packet has no type byte). Pure functions, unit-tested.
use bytes::{BufMut, Bytes, BytesMut};

/// Postgres's own limit on a startup packet (MAX_STARTUP_PACKET_LENGTH).
pub const MAX_STARTUP: usize = 10_000;
pub const SSL_REQUEST: u32 = 80877103;
pub const GSSENC_REQUEST: u32 = 80877104;
pub const CANCEL_REQUEST: u32 = 80877102;
pub const PROTOCOL_3: u32 = 3 << 16;
/// The message types a client sends once logged in (Query, Parse, Bind, Execute, Describe, Close, Sync,
/// Flush, FunctionCall, Terminate, CopyData, CopyDone, CopyFail; p: a late authentication answer).
pub const FRONTEND_TYPES: &[u8] = b"QPBEDCSHFXdcfp";

/// A message's length field: at least 4 (itself), at most `max` (a client's bound; the server's are
/// trusted up to Postgres's 1 GB).
pub fn check_length(len: u32, max: usize) -> Result<usize, String> {
    let len = len as usize;
    if len < 4 {
        return Err(format!("invalid message length {len}"));
    }
    if len > max {
        return Err(format!("message of {len} bytes is longer than the proxy's limit of {max} bytes"));
    }
    Ok(len)
}

/// A NUL-terminated string at the start of `b`: it and the rest after its NUL.
pub fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = b.iter().position(|&c| c == 0)?;
    Some((&b[..end], &b[end + 1..]))
}

/// The parameters of a startup packet's body after its version: name/value pairs, each NUL-terminated,
/// ending with an empty name. None if malformed.
pub fn startup_params(body: &[u8]) -> Option<Vec<(String, String)>> {
    let mut rest = body;
    let mut out = Vec::new();
    loop {
        let (name, r) = cstr(rest)?;
        if name.is_empty() {
            return Some(out);
        }
        let (value, r) = cstr(r)?;
        out.push((String::from_utf8_lossy(name).into_owned(), String::from_utf8_lossy(value).into_owned()));
        rest = r;
    }
}

/// A startup packet: length, version, the parameters, a closing NUL.
pub fn startup_packet(version: u32, params: &[(String, String)]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u32(0);
    b.put_u32(version);
    for (k, v) in params {
        b.put_slice(k.as_bytes());
        b.put_u8(0);
        b.put_slice(v.as_bytes());
        b.put_u8(0);
    }
    b.put_u8(0);
    let len = b.len() as u32;
    b[..4].copy_from_slice(&len.to_be_bytes());
    b.freeze()
}

/// A message of type `tag` with this body.
pub fn message(tag: u8, body: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + body.len());
    b.put_u8(tag);
    b.put_u32(4 + body.len() as u32);
    b.put_slice(body);
    b.freeze()
}

pub fn command_complete(tag: &str) -> Bytes {
    let mut body = tag.as_bytes().to_vec();
    body.push(0);
    message(b'C', &body)
}

pub fn no_data() -> Bytes {
    message(b'n', &[])
}

/// An ErrorResponse: severity, SQLSTATE, message and, when given, detail.
pub fn error_response(severity: &str, code: &str, msg: &str, detail: Option<&str>) -> Bytes {
    let mut body = Vec::new();
    for (f, v) in [(b'S', severity), (b'V', severity), (b'C', code), (b'M', msg)] {
        body.push(f);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    if let Some(d) = detail {
        body.push(b'D');
        body.extend_from_slice(d.as_bytes());
        body.push(0);
    }
    body.push(0);
    message(b'E', &body)
}

/// The fields of an ErrorResponse / NoticeResponse body, by their one-byte codes.
pub fn error_fields(body: &[u8]) -> Vec<(u8, String)> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some((&code, r)) = rest.split_first() {
        if code == 0 {
            break;
        }
        let Some((v, r)) = cstr(r) else { break };
        out.push((code, String::from_utf8_lossy(v).into_owned()));
        rest = r;
    }
    out
}

/// An ErrorResponse body whose DETAIL is the grammar's `at character N of the statement`: the same error
/// with that DETAIL taken off and the position `start + N` (characters of the client's text) given as
/// Postgres gives a syntax error's, so psql shows the statement and a caret. None for any other error.
pub fn with_statement_position(body: &[u8], start: usize) -> Option<Bytes> {
    let fields = error_fields(body);
    let n: usize = fields.iter().find(|(c, _)| *c == b'D')?.1.strip_prefix("at character ")?.strip_suffix(" of the statement")?.parse().ok()?;
    let mut out = Vec::with_capacity(body.len());
    for (code, value) in fields.iter().filter(|(c, _)| *c != b'D' && *c != b'P') {
        out.push(*code);
        out.extend_from_slice(value.as_bytes());
        out.push(0);
        if *code == b'M' {
            out.push(b'P');
            out.extend_from_slice((start + n).to_string().as_bytes());
            out.push(0);
        }
    }
    out.push(0);
    Some(message(b'E', &out))
}

/// The first column of a DataRow body, as text (None for NULL or a malformed row).
pub fn first_column(body: &[u8]) -> Option<String> {
    if body.len() < 6 || u16::from_be_bytes([body[0], body[1]]) == 0 {
        return None;
    }
    let len = i32::from_be_bytes([body[2], body[3], body[4], body[5]]);
    if len < 0 || body.len() < 6 + len as usize {
        return None;
    }
    Some(String::from_utf8_lossy(&body[6..6 + len as usize]).into_owned())
}

/// Parse's body: statement name, query text, and the rest (parameter types), as bytes.
pub fn parse_body(body: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (name, r) = cstr(body)?;
    let (query, rest) = cstr(r)?;
    Some((name, query, rest))
}

/// A Parse message with another query text.
pub fn parse_message(name: &[u8], query: &str, rest: &[u8]) -> Bytes {
    let mut body = Vec::with_capacity(name.len() + query.len() + rest.len() + 2);
    body.extend_from_slice(name);
    body.push(0);
    body.extend_from_slice(query.as_bytes());
    body.push(0);
    body.extend_from_slice(rest);
    message(b'P', &body)
}

/// A Query message.
pub fn query_message(query: &str) -> Bytes {
    let mut body = query.as_bytes().to_vec();
    body.push(0);
    message(b'Q', &body)
}

/// The text of a CommandComplete body (without its NUL).
pub fn tag_text(body: &[u8]) -> String {
    String::from_utf8_lossy(cstr(body).map(|(t, _)| t).unwrap_or(body)).into_owned()
}

/// An AuthenticationSASL message (code 10, then NUL-terminated mechanism names, then a NUL) without its
/// channel-binding mechanisms (`SCRAM-SHA-256-PLUS`).
pub fn sasl_without_plus(m: &Bytes) -> Bytes {
    let mut body = 10i32.to_be_bytes().to_vec();
    let mut rest = &m[9..];
    while let Some((name, r)) = cstr(rest) {
        if name.is_empty() {
            break;
        }
        if !name.ends_with(b"-PLUS") {
            body.extend_from_slice(name);
            body.push(0);
        }
        rest = r;
    }
    body.push(0);
    message(b'R', &body)
}

/// Escapes a word of the startup `options` (Postgres splits them at white space; a backslash keeps the
/// next character in the word).
pub fn escape_option(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        if c.is_whitespace() || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_bounded() {
        assert!(check_length(3, 100).is_err());
        assert_eq!(check_length(4, 100), Ok(4));
        assert!(check_length(1 << 30, 64 << 20).unwrap_err().contains("limit"));
    }

    #[test]
    fn startup_packets_round_trip() {
        let params = vec![("user".to_string(), "bob".to_string()), ("database".to_string(), "main@-1 hour".to_string())];
        let p = startup_packet(PROTOCOL_3, &params);
        assert_eq!(u32::from_be_bytes(p[..4].try_into().unwrap()) as usize, p.len());
        assert_eq!(u32::from_be_bytes(p[4..8].try_into().unwrap()), PROTOCOL_3);
        assert_eq!(startup_params(&p[8..]), Some(params));
        assert_eq!(startup_params(b"user\0bob"), None);
        assert_eq!(startup_params(b"user\0"), None);
    }

    #[test]
    fn messages_and_fields() {
        let e = error_response("FATAL", "3D000", "database \"x\" does not exist", Some("world \"x\" does not exist"));
        assert_eq!(e[0], b'E');
        let f = error_fields(&e[5..]);
        assert!(f.contains(&(b'C', "3D000".into())));
        assert!(f.contains(&(b'D', "world \"x\" does not exist".into())));
        let c = command_complete("MERGE 3");
        assert_eq!(&c[..], b"C\0\0\0\x0cMERGE 3\0");
        assert_eq!(tag_text(&c[5..]), "MERGE 3");
        assert_eq!(&no_data()[..], b"n\0\0\0\x04");
        // a DataRow of one text column, and of a NULL
        assert_eq!(first_column(b"\0\x01\0\0\0\x0cCREATE WORLD").as_deref(), Some("CREATE WORLD"));
        assert_eq!(first_column(b"\0\x01\xff\xff\xff\xff"), None);
        assert_eq!(first_column(b"\0\x01\0\0\0\x09short"), None);
        let p = parse_message(b"s1", "select 1", b"\0\0");
        assert_eq!(parse_body(&p[5..]), Some((&b"s1"[..], &b"select 1"[..], &b"\0\0"[..])));
    }

    #[test]
    fn sasl_mechanisms_lose_channel_binding() {
        let m = message(b'R', b"\0\0\0\x0aSCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        assert_eq!(&sasl_without_plus(&m)[..], &message(b'R', b"\0\0\0\x0aSCRAM-SHA-256\0\0")[..]);
    }

    #[test]
    fn options_escape_spaces_and_backslashes() {
        assert_eq!(escape_option("worlds.world=main@-1 hour"), "worlds.world=main@-1\\ hour");
        assert_eq!(escape_option("a\\b"), "a\\\\b");
    }
}
