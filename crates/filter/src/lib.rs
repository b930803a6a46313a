//! Consul's `?filter=` expression language (the go-bexpr grammar), parsed
//! once and evaluated against the JSON form of each result row.
//!
//! ```text
//! expr     := or
//! or       := and ("or" and)*
//! and      := unary ("and" unary)*
//! unary    := "not" unary | "(" expr ")" | match
//! match    := selector ("==" | "!=") value
//!           | selector "is" ["not"] "empty"
//!           | value ["not"] "in" selector
//!           | selector ["not"] ("contains" | "matches") value
//! selector := ident ("." ident | "[" string "]")*
//! value    := "string" | `raw string` | bare word
//! ```
//!
//! Pure: no IO, depends on nothing of Legate's.

pub mod rows;
mod shape;

use regex::Regex;
use serde_json::Value;

pub use shape::Shape;

/// A filter parse error, phrased for the HTTP 400 body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Failed to create boolean expression evaluator: {0}")]
pub struct FilterError(pub String);

/// One step of a selector path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathStep {
    /// A field name or map key.
    Field(String),
}

/// How deeply parentheses and `not` may nest in one expression. Parsing,
/// evaluating and dropping an expression recurse once per level, so the
/// limit is what keeps a hostile `?filter=` from exhausting the stack
/// (go-bexpr has none; Consul's parser survives deeper input only because
/// Go stacks grow). `a and b and c ...` chains are flat and cost no depth.
pub const MAX_NESTING: usize = 64;

/// A parsed filter expression.
#[derive(Debug, Clone)]
pub enum Expr {
    /// Every term holds (`a and b and ...`, kept flat).
    And(Vec<Expr>),
    /// Some term holds (`a or b or ...`, kept flat).
    Or(Vec<Expr>),
    /// The inner expression does not hold.
    Not(Box<Expr>),
    /// `selector == value`.
    Equal(Vec<PathStep>, String),
    /// `selector is empty`.
    IsEmpty(Vec<PathStep>),
    /// `value in selector` / `selector contains value`.
    Contains(Vec<PathStep>, String),
    /// `selector matches "regex"`.
    Matches(Vec<PathStep>, Regex),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Dot,
    LBracket,
    RBracket,
    LParen,
    RParen,
    EqEq,
    NotEq,
}

fn tokenize(input: &str) -> Result<Vec<Token>, FilterError> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '.' => {
                tokens.push(Token::Dot);
                i += 1;
            }
            '[' => {
                tokens.push(Token::LBracket);
                i += 1;
            }
            ']' => {
                tokens.push(Token::RBracket);
                i += 1;
            }
            '(' => {
                tokens.push(Token::LParen);
                i += 1;
            }
            ')' => {
                tokens.push(Token::RParen);
                i += 1;
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Token::EqEq);
                i += 2;
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Token::NotEq);
                i += 2;
            }
            '"' => {
                let mut text = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(FilterError(format!("unterminated string in {input:?}")))
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            match chars.get(i + 1) {
                                Some('n') => text.push('\n'),
                                Some('t') => text.push('\t'),
                                Some(other) => text.push(*other),
                                None => {
                                    return Err(FilterError(format!(
                                        "unterminated string in {input:?}"
                                    )))
                                }
                            }
                            i += 2;
                        }
                        Some(other) => {
                            text.push(*other);
                            i += 1;
                        }
                    }
                }
                tokens.push(Token::Quoted(text));
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..]
                    .iter()
                    .position(|c| *c == '`')
                    .ok_or_else(|| FilterError(format!("unterminated raw string in {input:?}")))?;
                tokens.push(Token::Quoted(chars[start..start + end].iter().collect()));
                i = start + end + 1;
            }
            c if is_word_char(c) => {
                let start = i;
                while i < chars.len() && is_word_char(chars[i]) {
                    i += 1;
                }
                tokens.push(Token::Word(chars[start..i].iter().collect()));
            }
            other => {
                return Err(FilterError(format!(
                    "unexpected character {other:?} at offset {i}"
                )))
            }
        }
    }
    Ok(tokens)
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | ':' | '/' | '+' | '*' | '@')
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// Parentheses and `not`s open at this point of the parse.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w == word)
    }

    fn peek_word_at(&self, offset: usize, word: &str) -> bool {
        matches!(self.tokens.get(self.pos + offset), Some(Token::Word(w)) if w == word)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn expect_word(&mut self, word: &str) -> Result<(), FilterError> {
        if self.peek_word(word) {
            self.pos += 1;
            Ok(())
        } else {
            Err(FilterError(format!("expected {word:?}")))
        }
    }

    fn parse_or(&mut self) -> Result<Expr, FilterError> {
        let mut terms = vec![self.parse_and()?];
        while self.peek_word("or") {
            self.pos += 1;
            terms.push(self.parse_and()?);
        }
        Ok(if terms.len() == 1 {
            terms.swap_remove(0)
        } else {
            Expr::Or(terms)
        })
    }

    fn parse_and(&mut self) -> Result<Expr, FilterError> {
        let mut terms = vec![self.parse_unary()?];
        while self.peek_word("and") {
            self.pos += 1;
            terms.push(self.parse_unary()?);
        }
        Ok(if terms.len() == 1 {
            terms.swap_remove(0)
        } else {
            Expr::And(terms)
        })
    }

    /// Enters one level of nesting, refusing to go past [`MAX_NESTING`].
    fn nested<T>(
        &mut self,
        parse: impl FnOnce(&mut Self) -> Result<T, FilterError>,
    ) -> Result<T, FilterError> {
        if self.depth >= MAX_NESTING {
            return Err(FilterError(format!(
                "expression nests parentheses or \"not\" deeper than {MAX_NESTING} levels"
            )));
        }
        self.depth += 1;
        let result = parse(self);
        self.depth -= 1;
        result
    }

    fn parse_unary(&mut self) -> Result<Expr, FilterError> {
        if self.peek_word("not") {
            self.pos += 1;
            return self.nested(|p| Ok(Expr::Not(Box::new(p.parse_unary()?))));
        }
        if self.peek() == Some(&Token::LParen) {
            self.pos += 1;
            let inner = self.nested(Self::parse_or)?;
            if self.next() != Some(Token::RParen) {
                return Err(FilterError("expected \")\"".to_string()));
            }
            return Ok(inner);
        }
        self.parse_match()
    }

    fn parse_value(&mut self) -> Result<String, FilterError> {
        match self.next() {
            Some(Token::Quoted(text)) => Ok(text),
            Some(Token::Word(word)) => {
                // A bare value may contain dots (`1.2.3`, `v1.web`).
                let mut text = word;
                while self.peek() == Some(&Token::Dot) {
                    if let Some(Token::Word(next)) = self.tokens.get(self.pos + 1).cloned() {
                        text.push('.');
                        text.push_str(&next);
                        self.pos += 2;
                    } else {
                        break;
                    }
                }
                Ok(text)
            }
            other => Err(FilterError(format!("expected a value, found {other:?}"))),
        }
    }

    fn parse_selector(&mut self) -> Result<Vec<PathStep>, FilterError> {
        let mut path = Vec::new();
        match self.next() {
            Some(Token::Word(word)) if !is_keyword(&word) => path.push(PathStep::Field(word)),
            other => return Err(FilterError(format!("expected a selector, found {other:?}"))),
        }
        loop {
            match self.peek() {
                Some(Token::Dot) => {
                    self.pos += 1;
                    match self.next() {
                        Some(Token::Word(word)) => path.push(PathStep::Field(word)),
                        other => {
                            return Err(FilterError(format!(
                                "expected a field name after \".\", found {other:?}"
                            )))
                        }
                    }
                }
                Some(Token::LBracket) => {
                    self.pos += 1;
                    let key = match self.next() {
                        Some(Token::Quoted(text)) | Some(Token::Word(text)) => text,
                        other => {
                            return Err(FilterError(format!(
                                "expected a key inside [], found {other:?}"
                            )))
                        }
                    };
                    if self.next() != Some(Token::RBracket) {
                        return Err(FilterError("expected \"]\"".to_string()));
                    }
                    path.push(PathStep::Field(key));
                }
                _ => break,
            }
        }
        Ok(path)
    }

    fn parse_match(&mut self) -> Result<Expr, FilterError> {
        // `value [not] in selector` starts with a value; detect it by looking ahead.
        let value_first = match self.peek() {
            Some(Token::Quoted(_)) => true,
            Some(Token::Word(_)) => {
                self.peek_word_at(1, "in")
                    || (self.peek_word_at(1, "not") && self.peek_word_at(2, "in"))
            }
            _ => false,
        };
        if value_first {
            let value = self.parse_value()?;
            let negate = if self.peek_word("not") {
                self.pos += 1;
                true
            } else {
                false
            };
            self.expect_word("in")?;
            let selector = self.parse_selector()?;
            let expr = Expr::Contains(selector, value);
            return Ok(if negate {
                Expr::Not(Box::new(expr))
            } else {
                expr
            });
        }
        let selector = self.parse_selector()?;
        match self.next() {
            Some(Token::EqEq) => Ok(Expr::Equal(selector, self.parse_value()?)),
            Some(Token::NotEq) => Ok(Expr::Not(Box::new(Expr::Equal(
                selector,
                self.parse_value()?,
            )))),
            Some(Token::Word(w)) if w == "is" => {
                let negate = if self.peek_word("not") {
                    self.pos += 1;
                    true
                } else {
                    false
                };
                self.expect_word("empty")?;
                let expr = Expr::IsEmpty(selector);
                Ok(if negate {
                    Expr::Not(Box::new(expr))
                } else {
                    expr
                })
            }
            Some(Token::Word(w)) if w == "not" => match self.next() {
                Some(Token::Word(op)) if op == "contains" => Ok(Expr::Not(Box::new(
                    Expr::Contains(selector, self.parse_value()?),
                ))),
                Some(Token::Word(op)) if op == "matches" => Ok(Expr::Not(Box::new(Expr::Matches(
                    selector,
                    compile(&self.parse_value()?)?,
                )))),
                other => Err(FilterError(format!(
                    "expected \"contains\" or \"matches\" after \"not\", found {other:?}"
                ))),
            },
            Some(Token::Word(w)) if w == "contains" => {
                Ok(Expr::Contains(selector, self.parse_value()?))
            }
            Some(Token::Word(w)) if w == "matches" => {
                Ok(Expr::Matches(selector, compile(&self.parse_value()?)?))
            }
            other => Err(FilterError(format!(
                "expected one of ==, !=, is, contains, matches after the selector, found {other:?}"
            ))),
        }
    }
}

fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "and" | "or" | "not" | "in" | "is" | "empty" | "contains" | "matches"
    )
}

fn compile(pattern: &str) -> Result<Regex, FilterError> {
    Regex::new(pattern)
        .map_err(|e| FilterError(format!("invalid regular expression {pattern:?}: {e}")))
}

impl Expr {
    /// Parses a filter expression.
    pub fn parse(input: &str) -> Result<Expr, FilterError> {
        let tokens = tokenize(input)?;
        if tokens.is_empty() {
            return Err(FilterError("empty filter expression".to_string()));
        }
        let mut parser = Parser {
            tokens,
            pos: 0,
            depth: 0,
        };
        let expr = parser.parse_or()?;
        if parser.pos < parser.tokens.len() {
            return Err(FilterError(format!(
                "unexpected {:?} after a complete expression",
                parser.tokens[parser.pos]
            )));
        }
        Ok(expr)
    }

    /// Evaluates the expression against a row in its JSON form (a row that
    /// cannot be serialised matches nothing).
    pub fn matches_row<T: serde::Serialize>(&self, row: &T) -> bool {
        serde_json::to_value(row)
            .map(|v| self.matches(&v))
            .unwrap_or(false)
    }

    /// Evaluates the expression against one row.
    pub fn matches(&self, row: &Value) -> bool {
        match self {
            Expr::And(terms) => terms.iter().all(|t| t.matches(row)),
            Expr::Or(terms) => terms.iter().any(|t| t.matches(row)),
            Expr::Not(inner) => !inner.matches(row),
            Expr::Equal(path, value) => resolve(row, path).iter().any(|field| equals(field, value)),
            Expr::IsEmpty(path) => resolve(row, path).iter().all(|field| is_empty(field)),
            Expr::Contains(path, value) => resolve(row, path)
                .iter()
                .any(|field| contains(field, value)),
            Expr::Matches(path, regex) => resolve(row, path).iter().any(|field| match field {
                Value::String(s) => regex.is_match(s),
                Value::Array(items) => items
                    .iter()
                    .any(|i| i.as_str().is_some_and(|s| regex.is_match(s))),
                _ => false,
            }),
        }
    }
}

/// The values `path` reaches in `row`. A step into a list steps into each
/// of its elements (`Checks.Status` is every check's status), so a match
/// holds when it holds for any of them.
fn resolve<'a>(row: &'a Value, path: &[PathStep]) -> Vec<&'a Value> {
    let mut current = vec![row];
    for PathStep::Field(name) in path {
        let mut next = Vec::with_capacity(current.len());
        for value in current {
            match value {
                Value::Object(map) => next.extend(map.get(name)),
                Value::Array(items) => next.extend(
                    items
                        .iter()
                        .filter_map(|item| item.as_object().and_then(|m| m.get(name))),
                ),
                _ => {}
            }
        }
        current = next;
    }
    current
}

fn equals(field: &Value, value: &str) -> bool {
    match field {
        Value::String(s) => s == value,
        Value::Bool(b) => value.parse::<bool>().is_ok_and(|v| v == *b),
        Value::Number(n) => value.parse::<f64>().is_ok_and(|v| n.as_f64() == Some(v)),
        Value::Null => value.is_empty(),
        _ => false,
    }
}

fn is_empty(field: &Value) -> bool {
    match field {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

fn contains(field: &Value, value: &str) -> bool {
    match field {
        Value::String(s) => s.contains(value),
        Value::Array(items) => items.iter().any(|item| equals(item, value)),
        Value::Object(map) => map.contains_key(value),
        _ => false,
    }
}

/// Keeps only the rows of `rows` that match `filter`; an empty filter keeps all.
pub fn filter_rows<T: serde::Serialize>(rows: Vec<T>, filter: &str) -> Result<Vec<T>, FilterError> {
    if filter.trim().is_empty() {
        return Ok(rows);
    }
    let expr = Expr::parse(filter)?;
    Ok(rows
        .into_iter()
        .filter(|row| expr.matches_row(row))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row() -> Value {
        json!({
            "ServiceName": "web",
            "ServicePort": 8080,
            "ServiceTags": ["v1", "primary"],
            "ServiceMeta": {"version": "1.2.3", "team-name": "a"},
            "ServiceEnableTagOverride": false,
            "Service": {"Meta": {"version": "v1"}},
            "Notes": ""
        })
    }

    #[test]
    fn equality_and_inequality() {
        assert!(Expr::parse("ServiceName == web").unwrap().matches(&row()));
        assert!(Expr::parse("ServiceName == \"web\"")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("ServiceName != db").unwrap().matches(&row()));
        assert!(Expr::parse("ServicePort == 8080").unwrap().matches(&row()));
        assert!(Expr::parse("ServiceEnableTagOverride == false")
            .unwrap()
            .matches(&row()));
        assert!(!Expr::parse("ServiceName == `db`").unwrap().matches(&row()));
    }

    #[test]
    fn selectors_reach_into_maps() {
        assert!(Expr::parse("Service.Meta.version == v1")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("ServiceMeta[\"team-name\"] == a")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("ServiceMeta.version == 1.2.3")
            .unwrap()
            .matches(&row()));
        assert!(!Expr::parse("ServiceMeta.missing == x")
            .unwrap()
            .matches(&row()));
    }

    #[test]
    fn membership_emptiness_and_regex() {
        assert!(Expr::parse("v1 in ServiceTags").unwrap().matches(&row()));
        assert!(Expr::parse("\"v2\" not in ServiceTags")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("ServiceTags contains primary")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("ServiceTags not contains canary")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("Notes is empty").unwrap().matches(&row()));
        assert!(Expr::parse("ServiceTags is not empty")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("ServiceName matches \"^w.b$\"")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("ServiceName not matches \"^db\"")
            .unwrap()
            .matches(&row()));
        assert!(Expr::parse("team-name in ServiceMeta")
            .unwrap()
            .matches(&row()));
    }

    #[test]
    fn boolean_operators_and_precedence() {
        let e =
            Expr::parse("ServiceName == db or ServiceName == web and ServicePort == 8080").unwrap();
        assert!(e.matches(&row()));
        let e =
            Expr::parse("(ServiceName == db or ServiceName == web) and not ServicePort == 8080")
                .unwrap();
        assert!(!e.matches(&row()));
    }

    #[test]
    fn errors_are_reported() {
        for bad in [
            "",
            "ServiceName ==",
            "ServiceName === web",
            "ServiceName matches \"(\"",
            "(ServiceName == web",
            "and",
            "Service.",
            "\"unterminated",
        ] {
            assert!(Expr::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn selectors_step_into_lists_of_objects() {
        let row = json!({"Checks": [{"Status": "passing"}, {"Status": "critical"}]});
        assert!(Expr::parse("Checks.Status == critical")
            .unwrap()
            .matches(&row));
        assert!(!Expr::parse("Checks.Status == warning")
            .unwrap()
            .matches(&row));
        assert!(!Expr::parse("Checks.Status is empty").unwrap().matches(&row));
        assert!(Expr::parse("Checks.Nothing is empty")
            .unwrap()
            .matches(&row));
    }

    #[test]
    fn filter_rows_keeps_matches() {
        let rows = vec![json!({"Name": "a"}), json!({"Name": "b"})];
        let kept = filter_rows(rows, "Name == b").unwrap();
        assert_eq!(kept, vec![json!({"Name": "b"})]);
    }
}
