//! Hostile `?filter=` input: bounded-time property runs (proptest) that
//! parse and evaluate arbitrary and adversarial expressions. Any panic or
//! stack overflow fails the run; every outcome must be a value or an error.

use legate_filter::{Expr, MAX_NESTING};
use proptest::prelude::*;
use serde_json::json;

fn row() -> serde_json::Value {
    json!({
        "Node": "n1", "Address": "10.0.0.1",
        "Meta": {"env": "prod", "team-a": ""},
        "Tags": ["a", "b"], "Port": 8080, "Enabled": true, "Nothing": null,
        "Service": {"Meta": {"version": "1"}, "Tags": []}
    })
}

/// Pieces of the grammar, glued at random into mostly-invalid expressions.
fn fragment() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "(",
        ")",
        "not",
        "and",
        "or",
        "==",
        "!=",
        "is",
        "empty",
        "in",
        "contains",
        "matches",
        "Node",
        "Meta",
        ".",
        "[",
        "]",
        "\"env\"",
        "`raw`",
        "\"(\"",
        "\"a\\\"",
        "Tags",
        "Port",
        "8080",
        "Service.Meta.version",
        "\"",
        "`",
        "x",
        "-",
        "\\",
        "\u{1F600}",
        " ",
    ])
}

fn parse_and_eval(input: &str) {
    if let Ok(expr) = Expr::parse(input) {
        let _ = expr.matches(&row());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(input in "\\PC{0,200}") {
        parse_and_eval(&input);
    }

    #[test]
    fn grammar_soup_never_panics(parts in prop::collection::vec(fragment(), 0..60)) {
        parse_and_eval(&parts.join(" "));
    }

    #[test]
    fn nesting_is_bounded(depth in 0usize..5000, use_not in any::<bool>()) {
        let input = if use_not {
            format!("{}Node == n1", "not ".repeat(depth))
        } else {
            format!("{}Node == n1{}", "(".repeat(depth), ")".repeat(depth))
        };
        match Expr::parse(&input) {
            Ok(expr) => {
                prop_assert!(depth <= MAX_NESTING, "depth {depth} was accepted");
                let matched = expr.matches(&row());
                prop_assert_eq!(matched, !use_not || depth % 2 == 0);
            }
            Err(e) => {
                prop_assert!(depth > MAX_NESTING, "depth {depth} was refused: {e}");
                prop_assert!(e.to_string().contains("deeper than"), "{e}");
            }
        }
    }
}

#[test]
fn the_reported_expression_is_refused_not_a_crash() {
    let input = format!("{}Node==x{}", "(".repeat(3000), ")".repeat(3000));
    let err = Expr::parse(&input).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("Failed to create boolean expression evaluator: "));
}

#[test]
fn long_flat_chains_cost_no_depth() {
    // 200,000 terms: parsed, evaluated and dropped without recursion per term.
    let terms: Vec<String> = (0..200_000).map(|i| format!("Node == n{i}")).collect();
    let expr = Expr::parse(&terms.join(" or ")).unwrap();
    assert!(expr.matches(&row()));
    let expr = Expr::parse(&terms.join(" and ")).unwrap();
    assert!(!expr.matches(&row()));
}
