//! An HCL1 parser: Consul's agent config and config-entry files are HCL1,
//! which HCL2 parsers reject in common spots (`connect { sidecar_service {} }`,
//! several attributes on one line). The output is a `serde_json::Value`, so
//! HCL and JSON files feed the same decoding.
//!
//! Grammar (HCL1): a body is a sequence of items separated by newlines or
//! commas; an item is `key = value`, `key [label ...] { body }`, or
//! `key [label ...] = { body }`; values are strings (with `${...}` kept
//! literally), heredocs (`<<EOF`, `<<-EOF`), numbers, booleans, lists
//! `[v, v,]` and objects `{ body }`. Comments are `#`, `//` and `/* */`.
//! A key given more than once in one body collects its values into a list,
//! as HCL1 does for repeated blocks.
//!
//! Pure: no IO, depends on nothing of Legate's.

use serde_json::{Map, Number, Value};

/// How deeply blocks, objects, lists and block labels may nest. Parsing,
/// and everything that walks the resulting value, recurse once per level,
/// so the bound keeps hostile input from exhausting the stack (Consul's
/// configs nest a handful of levels).
pub const MAX_NESTING: usize = 64;

/// A parse error with the 1-based line and column it was found at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct HclError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What was wrong.
    pub message: String,
}

/// Parses an HCL1 document into a JSON object.
pub fn parse(input: &str) -> Result<Value, HclError> {
    let mut parser = Parser {
        chars: input.chars().collect(),
        pos: 0,
        depth: 0,
    };
    let body = parser.parse_body(None)?;
    Ok(Value::Object(body))
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    /// Blocks, objects and lists open at this point.
    depth: usize,
}

impl Parser {
    fn error(&self, message: impl Into<String>) -> HclError {
        let mut line = 1;
        let mut column = 1;
        for c in self.chars.iter().take(self.pos) {
            if *c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        HclError {
            line,
            column,
            message: message.into(),
        }
    }

    /// Parses one nested level with `parse`, refusing to go deeper than
    /// [`MAX_NESTING`] (`extra` levels more are about to be added, as block
    /// labels do).
    fn nested<T>(
        &mut self,
        extra: usize,
        parse: impl FnOnce(&mut Self) -> Result<T, HclError>,
    ) -> Result<T, HclError> {
        if self.depth + 1 + extra > MAX_NESTING {
            return Err(self.error(format!(
                "blocks, objects and lists nest deeper than {MAX_NESTING} levels"
            )));
        }
        self.depth += 1;
        let result = parse(self);
        self.depth -= 1;
        result
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    /// Skips spaces, tabs and comments; newlines too when `newlines` is set.
    fn skip_space(&mut self, newlines: bool) -> Result<(), HclError> {
        loop {
            match self.peek() {
                Some(' ') | Some('\t') | Some('\r') => self.pos += 1,
                Some('\n') if newlines => self.pos += 1,
                Some('#') => self.skip_line_comment(),
                Some('/') if self.peek_at(1) == Some('/') => self.skip_line_comment(),
                Some('/') if self.peek_at(1) == Some('*') => {
                    let start = self.pos;
                    self.pos += 2;
                    loop {
                        match self.peek() {
                            None => {
                                self.pos = start;
                                return Err(self.error("unterminated /* comment"));
                            }
                            Some('*') if self.peek_at(1) == Some('/') => {
                                self.pos += 2;
                                break;
                            }
                            Some(_) => self.pos += 1,
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn skip_line_comment(&mut self) {
        while let Some(c) = self.peek() {
            if c == '\n' {
                break;
            }
            self.pos += 1;
        }
    }

    /// Parses items until `close` (or end of input for the top level).
    fn parse_body(&mut self, close: Option<char>) -> Result<Map<String, Value>, HclError> {
        let mut body = Map::new();
        loop {
            self.skip_space(true)?;
            match self.peek() {
                None => {
                    if close.is_some() {
                        return Err(self.error("unexpected end of input: missing '}'"));
                    }
                    return Ok(body);
                }
                Some(c) if Some(c) == close => {
                    self.pos += 1;
                    return Ok(body);
                }
                Some(',') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let key = self.parse_key()?;
            self.skip_space(false)?;
            let mut labels = Vec::new();
            loop {
                match self.peek() {
                    Some('"') => labels.push(self.parse_string()?),
                    Some(c) if is_ident_start(c) => labels.push(self.parse_ident()),
                    _ => break,
                }
                self.skip_space(false)?;
            }
            if self.depth + labels.len() > MAX_NESTING {
                return Err(self.error(format!(
                    "blocks, objects and lists nest deeper than {MAX_NESTING} levels"
                )));
            }
            let mut value = match self.peek() {
                Some('=') | Some(':') => {
                    self.pos += 1;
                    self.skip_space(false)?;
                    self.parse_value()?
                }
                Some('{') => {
                    self.pos += 1;
                    let labelled = labels.len();
                    Value::Object(self.nested(labelled, |p| p.parse_body(Some('}')))?)
                }
                _ => return Err(self.error(format!("expected '=' or '{{' after key {key:?}"))),
            };
            for label in labels.into_iter().rev() {
                let mut wrapper = Map::new();
                wrapper.insert(label, value);
                value = Value::Object(wrapper);
            }
            insert_merging(&mut body, key, value);
            self.skip_space(false)?;
            match self.peek() {
                None | Some('\n') | Some(',') => {}
                Some(c) if Some(c) == close => {}
                Some(c) if is_ident_start(c) || c == '"' => {
                    // HCL1 accepts several items on one line after a block.
                }
                Some(c) => return Err(self.error(format!("unexpected {c:?} after a value"))),
            }
        }
    }

    fn parse_key(&mut self) -> Result<String, HclError> {
        match self.peek() {
            Some('"') => self.parse_string(),
            Some(c) if is_ident_start(c) => Ok(self.parse_ident()),
            Some(c) => Err(self.error(format!("expected a key, found {c:?}"))),
            None => Err(self.error("expected a key")),
        }
    }

    fn parse_ident(&mut self) -> String {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if is_ident_char(c) {
                self.pos += 1;
            } else {
                break;
            }
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn parse_value(&mut self) -> Result<Value, HclError> {
        match self.peek() {
            Some('"') => Ok(Value::String(self.parse_string()?)),
            Some('<') if self.peek_at(1) == Some('<') => Ok(Value::String(self.parse_heredoc()?)),
            Some('{') => {
                self.pos += 1;
                Ok(Value::Object(self.nested(0, |p| p.parse_body(Some('}')))?))
            }
            Some('[') => {
                self.pos += 1;
                self.nested(0, Self::parse_list)
            }
            Some(c) if c == '-' || c == '+' || c.is_ascii_digit() || c == '.' => {
                self.parse_number()
            }
            Some(c) if is_ident_start(c) => {
                let word = self.parse_ident();
                match word.as_str() {
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    "null" => Ok(Value::Null),
                    other => Err(self.error(format!(
                        "unexpected bare word {other:?}: strings must be quoted"
                    ))),
                }
            }
            Some(c) => Err(self.error(format!("expected a value, found {c:?}"))),
            None => Err(self.error("expected a value, found end of input")),
        }
    }

    fn parse_list(&mut self) -> Result<Value, HclError> {
        let mut items = Vec::new();
        loop {
            self.skip_space(true)?;
            match self.peek() {
                Some(']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                None => return Err(self.error("unexpected end of input: missing ']'")),
                _ => {}
            }
            items.push(self.parse_value()?);
            self.skip_space(true)?;
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(']') => {}
                Some(c) => {
                    return Err(self.error(format!("expected ',' or ']' in a list, found {c:?}")))
                }
                None => return Err(self.error("unexpected end of input: missing ']'")),
            }
        }
    }

    fn parse_number(&mut self) -> Result<Value, HclError> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+') {
                self.pos += 1;
            } else {
                break;
            }
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        if let Ok(n) = text.parse::<i64>() {
            return Ok(Value::Number(n.into()));
        }
        if let Some(hex) = text.strip_prefix("0x") {
            if let Ok(n) = i64::from_str_radix(hex, 16) {
                return Ok(Value::Number(n.into()));
            }
        }
        if let Ok(f) = text.parse::<f64>() {
            if let Some(n) = Number::from_f64(f) {
                return Ok(Value::Number(n));
            }
        }
        self.pos = start;
        Err(self.error(format!("invalid number {text:?}")))
    }

    fn parse_string(&mut self) -> Result<String, HclError> {
        let start = self.pos;
        self.pos += 1; // opening quote
        let mut out = String::new();
        let mut interpolation_depth = 0usize;
        loop {
            match self.peek() {
                None | Some('\n') if interpolation_depth == 0 => {
                    self.pos = start;
                    return Err(self.error("unterminated string"));
                }
                None => {
                    self.pos = start;
                    return Err(self.error("unterminated ${ in string"));
                }
                Some('"') if interpolation_depth == 0 => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some('$') if self.peek_at(1) == Some('{') => {
                    interpolation_depth += 1;
                    out.push_str("${");
                    self.pos += 2;
                }
                Some('}') if interpolation_depth > 0 => {
                    interpolation_depth -= 1;
                    out.push('}');
                    self.pos += 1;
                }
                Some('\\') => {
                    let escaped = self.peek_at(1);
                    self.pos += 2;
                    match escaped {
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some('r') => out.push('\r'),
                        Some('"') => out.push('"'),
                        Some('\\') => out.push('\\'),
                        Some('u') => {
                            let hex: String = self.chars.iter().skip(self.pos).take(4).collect();
                            let code = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| self.error(format!("invalid \\u escape {hex:?}")))?;
                            out.push(code);
                            self.pos += 4;
                        }
                        Some(other) => {
                            out.push('\\');
                            out.push(other);
                        }
                        None => return Err(self.error("unterminated string")),
                    }
                }
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn parse_heredoc(&mut self) -> Result<String, HclError> {
        self.pos += 2; // <<
        let indented = if self.peek() == Some('-') {
            self.pos += 1;
            true
        } else {
            false
        };
        let marker = self.parse_ident();
        if marker.is_empty() {
            return Err(self.error("heredoc needs a marker, like <<EOF"));
        }
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == '\n' {
                break;
            }
        }
        let mut lines = Vec::new();
        loop {
            if self.peek().is_none() {
                return Err(self.error(format!("heredoc is missing its closing {marker:?}")));
            }
            let start = self.pos;
            while let Some(c) = self.peek() {
                if c == '\n' {
                    break;
                }
                self.pos += 1;
            }
            let line: String = self.chars[start..self.pos].iter().collect();
            let line = line.trim_end_matches('\r').to_string();
            if self.peek() == Some('\n') {
                self.pos += 1;
            }
            if line.trim() == marker {
                break;
            }
            lines.push(line);
        }
        if indented {
            let indent = lines
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            for line in lines.iter_mut() {
                *line = line.chars().skip(indent).collect();
            }
        }
        let mut text = lines.join("\n");
        text.push('\n');
        Ok(text)
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn insert_merging(body: &mut Map<String, Value>, key: String, value: Value) {
    match body.get_mut(&key) {
        None => {
            body.insert(key, value);
        }
        Some(existing) => {
            // Anything repeated becomes a list, as HCL1 decodes repeated blocks.
            match existing {
                Value::Array(items)
                    if items.first().is_some_and(Value::is_object) && value.is_object() =>
                {
                    items.push(value)
                }
                other => {
                    let previous = std::mem::take(other);
                    *other = Value::Array(vec![previous, value]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
