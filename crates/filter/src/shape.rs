//! What fields the rows of an endpoint have, so selectors can be checked
//! before a filter runs, as go-bexpr checks them against the Go type: a
//! typo (`Nodee == vm`) is `Selector "Nodee" is not valid` rather than a
//! filter that silently matches nothing (or, under `not`, everything).

use std::collections::BTreeMap;

use crate::{Expr, FilterError, PathStep};

/// The shape of a row or of one of its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A string, number or boolean: nothing to select below it.
    Leaf,
    /// Anything (free-form parts such as proxy configuration): every
    /// selector below it is accepted.
    Any,
    /// A map with free-form keys, each holding this shape.
    Map(Box<Shape>),
    /// A list whose elements have this shape.
    List(Box<Shape>),
    /// Named fields.
    Struct(BTreeMap<String, Shape>),
}

impl Shape {
    /// A struct from a compact description: fields separated by
    /// whitespace, each `Name` (a leaf), `Name:{}` (a map of leaves),
    /// `Name:[]` (a list of leaves) or `Name:*` (anything); `nested` adds
    /// fields with shapes of their own.
    pub fn fields(description: &str, nested: Vec<(&str, Shape)>) -> Shape {
        let mut fields: BTreeMap<String, Shape> = description
            .split_whitespace()
            .map(|field| match field.split_once(':') {
                Some((name, "{}")) => (name.to_string(), Shape::Map(Box::new(Shape::Leaf))),
                Some((name, "[]")) => (name.to_string(), Shape::List(Box::new(Shape::Leaf))),
                Some((name, _)) => (name.to_string(), Shape::Any),
                None => (field.to_string(), Shape::Leaf),
            })
            .collect();
        fields.extend(nested.into_iter().map(|(name, s)| (name.to_string(), s)));
        Shape::Struct(fields)
    }

    /// Checks one selector, returning the go-bexpr error for the first
    /// step that names nothing.
    fn check(&self, path: &[PathStep]) -> Result<(), FilterError> {
        let mut shape = self;
        for (i, PathStep::Field(name)) in path.iter().enumerate() {
            // Selecting into a list selects into its elements.
            while let Shape::List(element) = shape {
                shape = element;
            }
            shape = match shape {
                Shape::Any => return Ok(()),
                Shape::Map(value) => value,
                Shape::Struct(fields) => match fields.get(name) {
                    Some(field) => field,
                    None => return Err(invalid(&path[..=i])),
                },
                Shape::Leaf | Shape::List(_) => return Err(invalid(&path[..=i])),
            };
        }
        Ok(())
    }
}

fn invalid(path: &[PathStep]) -> FilterError {
    let text: Vec<&str> = path
        .iter()
        .map(|PathStep::Field(name)| name.as_str())
        .collect();
    FilterError(format!("Selector {:?} is not valid", text.join(".")))
}

impl Expr {
    /// Parses a filter for rows of `shape`, refusing selectors they lack.
    pub fn parse_for(input: &str, shape: &Shape) -> Result<Expr, FilterError> {
        let expr = Expr::parse(input)?;
        expr.check(shape)?;
        Ok(expr)
    }

    /// Checks every selector of the expression against `shape`.
    pub fn check(&self, shape: &Shape) -> Result<(), FilterError> {
        match self {
            Expr::And(terms) | Expr::Or(terms) => terms.iter().try_for_each(|t| t.check(shape)),
            Expr::Not(inner) => inner.check(shape),
            Expr::Equal(path, _)
            | Expr::IsEmpty(path)
            | Expr::Contains(path, _)
            | Expr::Matches(path, _) => shape.check(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape::fields(
            "Node Address Meta:{} Tags:[] Proxy:*",
            vec![(
                "Checks",
                Shape::List(Box::new(Shape::fields("Status CheckID", vec![]))),
            )],
        )
    }

    fn check(filter: &str) -> Result<(), String> {
        Expr::parse(filter)
            .unwrap()
            .check(&shape())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn selectors_are_checked_against_the_shape() {
        for ok in [
            "Node == a",
            "Meta.anything == x",
            "Meta[\"team-a\"] == x",
            "a in Tags",
            "Proxy.Upstreams.Whatever == 1",
            "Checks.Status == passing",
            "not (Node == a or Address == b) and Checks is empty",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, selector) in [
            ("Nodee == vm", "Nodee"),
            ("not Nodee == vm", "Nodee"),
            ("Node == a and Adress == b", "Adress"),
            ("Node.Name == a", "Node.Name"),
            ("Meta.a.b == x", "Meta.a.b"),
            ("Checks.Stat == passing", "Checks.Stat"),
        ] {
            assert_eq!(
                check(bad),
                Err(format!(
                    "Failed to create boolean expression evaluator: Selector {selector:?} is not valid"
                )),
                "{bad}"
            );
        }
    }
}
