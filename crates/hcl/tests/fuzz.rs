//! Hostile HCL: bounded-time property runs that parse arbitrary and
//! adversarial documents. Any panic or stack overflow fails the run.

use legate_hcl::{parse, MAX_NESTING};
use proptest::prelude::*;

fn fragment() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a",
        "b",
        "=",
        "{",
        "}",
        "[",
        "]",
        ",",
        "\"s\"",
        "\"${x}\"",
        "1",
        "-2.5e3",
        "true",
        "null",
        "\n",
        " ",
        "#c\n",
        "//c\n",
        "/*",
        "*/",
        "<<EOF\nx\nEOF\n",
        "<<-EOT\n  y\n  EOT\n",
        "\"",
        "\\",
        "label",
        ":",
        "\u{00e9}",
        "0x",
        "1e999",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(input in "\\PC{0,300}") {
        let _ = parse(&input);
    }

    #[test]
    fn grammar_soup_never_panics(parts in prop::collection::vec(fragment(), 0..80)) {
        let _ = parse(&parts.concat());
    }

    #[test]
    fn nesting_is_bounded(depth in 0usize..20_000, kind in 0u8..4) {
        let input = match kind {
            0 => format!("{}{}", "a {".repeat(depth), "}".repeat(depth)),
            1 => format!("a = {}1{}", "[".repeat(depth), "]".repeat(depth)),
            2 => format!("a = {}1{}", "{ b = ".repeat(depth), " }".repeat(depth)),
            _ => format!("a {} {{}}", "l ".repeat(depth)),
        };
        match parse(&input) {
            Ok(_) => prop_assert!(depth <= MAX_NESTING, "depth {depth} accepted ({kind})"),
            Err(e) => prop_assert!(
                depth > MAX_NESTING / 2 && e.message.contains("deeper than"),
                "depth {depth} ({kind}): {e}"
            ),
        }
    }
}
