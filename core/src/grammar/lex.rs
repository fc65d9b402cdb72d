//! The tokenizer of the spec's statements: words (folded), "quoted" names, 'strings' (E'', $$), numbers,
//! symbols; comments skipped. Positions are byte offsets into the statement, for error positions.
use super::ParseError;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// a bare word, folded to lower case: a keyword or a name
    Word(String),
    /// a "quoted" identifier, as written
    Quoted(String),
    /// a 'string', E'string' or $tag$dollar-quoted$tag$ string: its value
    Str(String),
    /// digits, with decimals if written; a sign is a separate Sym('-')
    Num(String),
    /// any other character: punctuation, and the pieces of operators and $1 in RESTORE's expression
    Sym(char),
    End,
}

/// A token and where it is in the text, in bytes (`start..end` is its source text).
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// Splits the text into tokens, ending with `Tok::End`. Works on bytes: every character the grammar
/// cares about is ASCII, and a multibyte character can only be part of a word, string or comment.
pub(crate) fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    loop {
        i = skip_space_and_comments(text, i)?;
        if i == b.len() {
            toks.push(Token { tok: Tok::End, start: i, end: i });
            return Ok(toks);
        }
        let start = i;
        let tok = match b[i] {
            b'\'' => {
                let (s, end) = quoted(text, i, b'\'', "unterminated quoted string")?;
                i = end;
                Tok::Str(s)
            }
            b'"' => {
                let (s, end) = quoted(text, i, b'"', "unterminated quoted identifier")?;
                i = end;
                Tok::Quoted(s)
            }
            b'e' | b'E' if b.get(i + 1) == Some(&b'\'') => {
                let (s, end) = escape_string(text, i)?;
                i = end;
                Tok::Str(s)
            }
            b'$' => match dollar_tag(b, i) {
                Some(len) => {
                    let (s, end) = dollar_string(text, i, len)?;
                    i = end;
                    Tok::Str(s)
                }
                None => {
                    i += 1;
                    Tok::Sym('$')
                }
            },
            c if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) => {
                i = digits(b, i);
                // decimals, as SQL writes them: 1.5, .5, and 5. (a dot not followed by a name)
                if b.get(i) == Some(&b'.') && !b.get(i + 1).is_some_and(|&c| is_word_start(c)) {
                    i = digits(b, i + 1);
                }
                // an exponent, as SQL writes numbers: 1e3, 2.5E-4
                if matches!(b.get(i), Some(b'e' | b'E')) {
                    let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
                    if b.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
                        i = digits(b, i + 1 + sign);
                    }
                }
                Tok::Num(text[start..i].to_string())
            }
            c if is_word_start(c) => {
                while i < b.len() && (is_word_start(b[i]) || b[i].is_ascii_digit() || b[i] == b'$') {
                    i += 1;
                }
                // Postgres folds only ASCII letters in UTF-8 databases.
                Tok::Word(text[start..i].to_ascii_lowercase())
            }
            c => {
                i += 1;
                Tok::Sym(c as char)
            }
        };
        toks.push(Token { tok, start, end: i });
    }
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn digits(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

fn skip_space_and_comments(text: &str, mut i: usize) -> Result<usize, ParseError> {
    let b = text.as_bytes();
    loop {
        match (b.get(i), b.get(i + 1)) {
            (Some(c), _) if c.is_ascii_whitespace() => i += 1,
            (Some(b'-'), Some(b'-')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (Some(b'/'), Some(b'*')) => {
                // Block comments nest, as in Postgres.
                let start = i;
                let mut depth = 0;
                loop {
                    match (b.get(i), b.get(i + 1)) {
                        (None, _) => return Err(lex_error(text, start, "unterminated /* comment")),
                        (Some(b'/'), Some(b'*')) => {
                            depth += 1;
                            i += 2;
                        }
                        (Some(b'*'), Some(b'/')) => {
                            depth -= 1;
                            i += 2;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => i += 1,
                    }
                }
            }
            _ => return Ok(i),
        }
    }
}

/// A string or identifier between `q`s, a doubled `q` standing for one. Returns its value and the end.
fn quoted(text: &str, start: usize, q: u8, unterminated: &str) -> Result<(String, usize), ParseError> {
    let b = text.as_bytes();
    let mut value = String::new();
    let mut from = start + 1;
    let mut i = from;
    loop {
        match b.get(i) {
            None => return Err(lex_error(text, start, unterminated)),
            Some(&c) if c == q && b.get(i + 1) == Some(&q) => {
                value.push_str(&text[from..=i]);
                i += 2;
                from = i;
            }
            Some(&c) if c == q => {
                value.push_str(&text[from..i]);
                return Ok((value, i + 1));
            }
            Some(_) => i += 1,
        }
    }
}

/// E'...': backslash escapes as in Postgres (\n \t \b \f \r, \ooo octal and \xhh hex bytes,
/// \uXXXX and \UXXXXXXXX code points, \c for any other c), and '' for a quote.
fn escape_string(text: &str, start: usize) -> Result<(String, usize), ParseError> {
    let b = text.as_bytes();
    let mut out: Vec<u8> = Vec::new();
    // Up to `max` digits of `radix` from `i`: their value and where they end.
    let number = |i: usize, radix: u32, max: usize| {
        let len = b[i..].iter().take(max).take_while(|c| (**c as char).is_digit(radix)).count();
        (u32::from_str_radix(&text[i..i + len], radix).unwrap_or(0), i + len)
    };
    let mut i = start + 2;
    loop {
        match b.get(i) {
            None => return Err(lex_error(text, start, "unterminated quoted string")),
            Some(b'\'') if b.get(i + 1) == Some(&b'\'') => {
                out.push(b'\'');
                i += 2;
            }
            Some(b'\'') => break,
            Some(b'\\') => {
                let Some(&c) = b.get(i + 1) else {
                    return Err(lex_error(text, start, "unterminated quoted string"));
                };
                i += 2;
                match c {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'r' => out.push(b'\r'),
                    b'0'..=b'7' => {
                        let (v, end) = number(i - 1, 8, 3);
                        out.push(v as u8); // Postgres keeps the low byte of \777 too
                        i = end;
                    }
                    b'x' if b.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                        let (v, end) = number(i, 16, 2);
                        out.push(v as u8);
                        i = end;
                    }
                    b'u' | b'U' => {
                        let len = if c == b'u' { 4 } else { 8 };
                        let (v, end) = number(i, 16, len);
                        let ch = Some(v).filter(|_| end - i == len).and_then(char::from_u32).filter(|&ch| ch != '\0');
                        let Some(ch) = ch else {
                            return Err(error_at_byte(text, i - 2, "22025", "invalid Unicode escape value".into()));
                        };
                        out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        i = end;
                    }
                    // Anything else stands for itself (\\ and \' too); a multibyte character's other
                    // bytes follow as ordinary ones.
                    _ => out.push(c),
                }
            }
            Some(&c) => {
                out.push(c);
                i += 1;
            }
        }
    }
    // \0 and stray \x bytes can make text Postgres would refuse.
    match String::from_utf8(out) {
        Ok(s) if !s.contains('\0') => Ok((s, i + 1)),
        _ => Err(error_at_byte(text, start, "22021", "invalid byte sequence for encoding \"UTF8\"".into())),
    }
}

/// The length of the `$tag$` or `$$` starting at `i`, if one does (`$1` is a parameter, not a tag).
fn dollar_tag(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    if b.get(j).is_some_and(|&c| is_word_start(c)) {
        while b.get(j).is_some_and(|&c| is_word_start(c) || c.is_ascii_digit()) {
            j += 1;
        }
    }
    (b.get(j) == Some(&b'$')).then_some(j + 1 - i)
}

/// The string opened by the `len`-byte tag at `start`, up to the same tag: its value and the end.
fn dollar_string(text: &str, start: usize, len: usize) -> Result<(String, usize), ParseError> {
    let (tag, body) = (&text[start..start + len], start + len);
    match text[body..].find(tag) {
        Some(k) => Ok((text[body..body + k].to_string(), body + k + len)),
        None => Err(lex_error(text, start, "unterminated dollar-quoted string")),
    }
}

/// An unterminated string, identifier or comment, reported as Postgres does: with the rest of the text.
fn lex_error(text: &str, start: usize, what: &str) -> ParseError {
    error_at_byte(text, start, "42601", format!("{what} at or near \"{}\"", &text[start..]))
}

/// An error at a byte offset, given as Postgres gives positions: 1-based, in characters.
pub(super) fn error_at_byte(text: &str, byte: usize, sqlstate: &'static str, message: String) -> ParseError {
    ParseError { sqlstate, message, position: text[..byte].chars().count() + 1 }
}

// ---------------------------------------------------------------------------------------------------
// The grammar
