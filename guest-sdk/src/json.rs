//! A small JSON reader (RFC 8259) for the files a model folder holds, such as
//! `config.json` and `generation_config.json`. The SDK has no dependencies, so it reads JSON
//! itself; it parses a whole document into a [`Value`] and reports errors with their byte
//! offset.

use crate::error::{Error, ErrorKind, Result};

/// A parsed JSON value. Objects keep their keys in file order.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as an f64 (exact for integers up to 2^53).
    Number(f64),
    /// A string, its escapes decoded.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object: its members in file order.
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The member `key` of an object; `None` for a missing key or a value that is not an
    /// object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// The number as an integer, if this is a number with no fractional part.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_f64()
            .filter(|n| n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15)
            .map(|n| n as i64)
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// Parses a whole JSON document. `what` names the document in errors.
#[track_caller]
pub fn parse(text: &str, what: &str) -> Result<Value> {
    let mut p = Parser {
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    let value = p.value().and_then(|v| {
        p.skip_space();
        if p.at == p.bytes.len() {
            Ok(v)
        } else {
            Err("unexpected text after the JSON value".to_string())
        }
    });
    value.map_err(|e| {
        Error::new(
            ErrorKind::Invalid,
            format!("{what} is not valid JSON: {e} at byte {}", p.at),
        )
    })
}

/// Nesting deeper than this is refused rather than recursed into.
const MAX_DEPTH: usize = 128;

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    depth: usize,
}

type Parsed<T> = std::result::Result<T, String>;

impl Parser<'_> {
    fn skip_space(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Parsed<()> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected `{}`", byte as char))
        }
    }

    fn literal(&mut self, word: &str, value: Value) -> Parsed<Value> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err("expected a value".to_string())
        }
    }

    fn value(&mut self) -> Parsed<Value> {
        self.skip_space();
        match self.peek() {
            Some(b'{') => self.nested(Parser::object),
            Some(b'[') => self.nested(Parser::array),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err("expected a value".to_string()),
            None => Err("unexpected end of the document".to_string()),
        }
    }

    fn nested(&mut self, f: fn(&mut Self) -> Parsed<Value>) -> Parsed<Value> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nesting deeper than {MAX_DEPTH} levels"));
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn object(&mut self) -> Parsed<Value> {
        self.expect(b'{')?;
        let mut members = Vec::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_space();
            let key = self.string()?;
            self.skip_space();
            self.expect(b':')?;
            members.push((key, self.value()?));
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                _ => return Err("expected `,` or `}`".to_string()),
            }
        }
    }

    fn array(&mut self) -> Parsed<Value> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err("expected `,` or `]`".to_string()),
            }
        }
    }

    fn number(&mut self) -> Parsed<Value> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.at += 1;
            }
            p.at > from
        };
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        if !digits(self) {
            return Err("expected digits".to_string());
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !digits(self) {
                return Err("expected digits after `.`".to_string());
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !digits(self) {
                return Err("expected digits in the exponent".to_string());
            }
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).map_err(|e| e.to_string())?;
        text.parse()
            .map(Value::Number)
            .map_err(|_| format!("bad number `{text}`"))
    }

    fn hex4(&mut self) -> Parsed<u32> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or("a short \\u escape")?;
        let text = std::str::from_utf8(digits).map_err(|e| e.to_string())?;
        let code = u32::from_str_radix(text, 16).map_err(|_| format!("bad \\u escape `{text}`"))?;
        self.at += 4;
        Ok(code)
    }

    fn string(&mut self) -> Parsed<String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let run = self.at;
            while !matches!(self.peek(), Some(b'"' | b'\\') | None) {
                if self.bytes[self.at] < 0x20 {
                    return Err("a control character in a string".to_string());
                }
                self.at += 1;
            }
            out.push_str(
                std::str::from_utf8(&self.bytes[run..self.at]).map_err(|e| e.to_string())?,
            );
            match self.peek() {
                None => return Err("an unterminated string".to_string()),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(_) => {
                    self.at += 1;
                    let escape = self.peek().ok_or("an unterminated escape")?;
                    self.at += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xD800..0xDC00).contains(&code) {
                                if !self.bytes[self.at..].starts_with(b"\\u") {
                                    return Err("a lone high surrogate".to_string());
                                }
                                self.at += 2;
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err("a bad low surrogate".to_string());
                                }
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            }
                            out.push(char::from_u32(code).ok_or("a lone low surrogate")?);
                        }
                        _ => return Err(format!("bad escape `\\{}`", escape as char)),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_config() {
        let v = parse(
            r#"{"a": 1, "b": [true, null, -2.5e3], "c": {"d": "x\u00e9\ud83d\ude00\n"}}"#,
            "test",
        )
        .unwrap();
        assert_eq!(v.get("a").and_then(Value::as_i64), Some(1));
        assert_eq!(
            v.get("b"),
            Some(&Value::Array(vec![
                Value::Bool(true),
                Value::Null,
                Value::Number(-2500.0)
            ]))
        );
        assert_eq!(
            v.get("c").and_then(|c| c.get("d")).and_then(Value::as_str),
            Some("xé😀\n")
        );
    }

    #[test]
    fn reports_errors_with_offsets() {
        for bad in [
            "{",
            "[1,]",
            "{\"a\" 1}",
            "01x",
            "\"\\x\"",
            "[1] 2",
            "\"\\ud800\"",
        ] {
            let e = parse(bad, "doc").unwrap_err();
            assert!(e.message().contains("doc is not valid JSON"), "{bad}: {e}");
        }
        let deep = "[".repeat(1000);
        assert!(parse(&deep, "doc")
            .unwrap_err()
            .message()
            .contains("nesting"));
    }
}
