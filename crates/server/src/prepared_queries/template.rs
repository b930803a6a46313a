//! Prepared-query templates: every string of a template's `Service`
//! block may hold `${…}` interpolations (Consul's HIL subset:
//! `name.full`, `name.prefix`, `name.suffix`, `agent.segment` and
//! `match(N)`), rendered with the name the query was looked up by and
//! the groups of the template's `Regexp`.

use std::collections::BTreeMap;

use legate_types::prepared_query::{PreparedQuery, ServiceQuery, TEMPLATE_NAME_PREFIX_MATCH};
use regex::Regex;

/// One piece of a parsed string.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Variable(Variable),
}

#[derive(Debug, Clone, PartialEq)]
enum Variable {
    Full,
    Prefix,
    Suffix,
    Segment,
    Match(usize),
    /// Parses, but fails when evaluated (HIL's semantic errors): the
    /// message.
    Fails(String),
}

/// The values a render reads.
struct Scope<'a> {
    full: &'a str,
    prefix: &'a str,
    matches: Vec<String>,
}

impl Variable {
    fn parse(expression: &str) -> Result<Variable, String> {
        let e = expression.trim();
        if e.is_empty() {
            return Err("expected expression".into());
        }
        match e {
            "name.full" => return Ok(Variable::Full),
            "name.prefix" => return Ok(Variable::Prefix),
            "name.suffix" => return Ok(Variable::Suffix),
            "agent.segment" => return Ok(Variable::Segment),
            _ => {}
        }
        if let Some(argument) = e
            .strip_prefix("match")
            .map(str::trim_start)
            .and_then(|rest| rest.strip_prefix('('))
            .and_then(|rest| rest.strip_suffix(')'))
        {
            return Ok(match argument.trim().parse::<usize>() {
                Ok(n) => Variable::Match(n),
                Err(_) => {
                    Variable::Fails("match: argument 1 should be type int, got type string".into())
                }
            });
        }
        let identifier = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        if let Some((name, _)) = e.split_once('(') {
            if !e.ends_with(')') || !name.trim().chars().all(identifier) {
                return Err(format!("syntax error in {e:?}"));
            }
            return Ok(Variable::Fails(format!(
                "unknown function called: {}",
                name.trim()
            )));
        }
        if !e.chars().all(identifier) {
            return Err(format!("syntax error in {e:?}"));
        }
        Ok(Variable::Fails(format!("unknown variable accessed: {e}")))
    }

    fn value(&self, scope: &Scope<'_>) -> Result<String, String> {
        Ok(match self {
            Variable::Full => scope.full.to_string(),
            Variable::Prefix => scope.prefix.to_string(),
            Variable::Suffix => scope
                .full
                .strip_prefix(scope.prefix)
                .unwrap_or(scope.full)
                .to_string(),
            Variable::Segment => String::new(),
            Variable::Match(n) => scope.matches.get(*n).cloned().unwrap_or_default(),
            Variable::Fails(message) => return Err(message.clone()),
        })
    }
}

/// Splits `text` into literal text and `${…}` interpolations (`$${` is a
/// literal `${`).
fn parse(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            literal.push_str(&rest[..at - 1]);
            literal.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        literal.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err("expected \"}\" but found end of input".into());
        };
        if !literal.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut literal)));
        }
        pieces.push(Piece::Variable(Variable::parse(&after[..end])?));
        rest = &after[end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

fn render_text(text: &str, scope: &Scope<'_>) -> Result<String, String> {
    parse(text)?
        .iter()
        .map(|piece| match piece {
            Piece::Text(t) => Ok(t.clone()),
            Piece::Variable(v) => v.value(scope),
        })
        .collect()
}

/// Calls `visit` with the path and value of every string of `service`
/// (list items and map values included), replacing each with its result.
fn each_string(
    service: &mut ServiceQuery,
    visit: &mut dyn FnMut(&str, &str) -> Result<String, String>,
) -> Result<(), String> {
    fn one(
        path: &str,
        value: &mut String,
        visit: &mut dyn FnMut(&str, &str) -> Result<String, String>,
    ) -> Result<(), String> {
        *value = visit(path, value)?;
        Ok(())
    }
    fn list(
        path: &str,
        values: &mut Option<Vec<String>>,
        visit: &mut dyn FnMut(&str, &str) -> Result<String, String>,
    ) -> Result<(), String> {
        for (i, v) in values.iter_mut().flatten().enumerate() {
            one(&format!("{path}[{i}]"), v, visit)?;
        }
        Ok(())
    }
    fn map(
        path: &str,
        values: &mut Option<BTreeMap<String, String>>,
        visit: &mut dyn FnMut(&str, &str) -> Result<String, String>,
    ) -> Result<(), String> {
        for (k, v) in values.iter_mut().flatten() {
            one(&format!("{path}[{k}]"), v, visit)?;
        }
        Ok(())
    }
    one(".Service", &mut service.service, visit)?;
    one(".SamenessGroup", &mut service.sameness_group, visit)?;
    list(
        ".Failover.Datacenters",
        &mut service.failover.datacenters,
        visit,
    )?;
    for (i, t) in service.failover.targets.iter_mut().flatten().enumerate() {
        one(&format!(".Failover.Targets[{i}].Peer"), &mut t.peer, visit)?;
        one(
            &format!(".Failover.Targets[{i}].Datacenter"),
            &mut t.datacenter,
            visit,
        )?;
    }
    list(".IgnoreCheckIDs", &mut service.ignore_check_ids, visit)?;
    one(".Near", &mut service.near, visit)?;
    list(".Tags", &mut service.tags, visit)?;
    map(".NodeMeta", &mut service.node_meta, visit)?;
    map(".ServiceMeta", &mut service.service_meta, visit)?;
    one(".Peer", &mut service.peer, visit)
}

/// Checks a template as Consul's compile does: its type, every string's
/// syntax, its regexp, and a first render with its own name.
pub(crate) fn compile(query: &PreparedQuery) -> Result<(), String> {
    if query.template.kind != TEMPLATE_NAME_PREFIX_MATCH {
        return Err(format!("Bad Template.Type '{}'", query.template.kind));
    }
    let mut service = query.service.clone();
    each_string(&mut service, &mut |path, value| {
        parse(value)
            .map(|_| value.to_string())
            .map_err(|e| format!("Bad format '{value}' in Service{path}: {e}"))
    })?;
    if !query.template.regexp.is_empty() {
        Regex::new(&query.template.regexp).map_err(|e| format!("Bad Regexp: {e}"))?;
    }
    render(query, &query.name)?;
    Ok(())
}

/// The template rendered for `name`, the name it was looked up by.
pub(crate) fn render(template: &PreparedQuery, name: &str) -> Result<PreparedQuery, String> {
    let matches = if template.template.regexp.is_empty() {
        Vec::new()
    } else {
        let re = Regex::new(&template.template.regexp).map_err(|e| format!("Bad Regexp: {e}"))?;
        re.captures(name)
            .map(|c| {
                c.iter()
                    .map(|m| m.map(|m| m.as_str().to_string()).unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default()
    };
    let scope = Scope {
        full: name,
        prefix: &template.name,
        matches,
    };
    let mut rendered = template.clone();
    each_string(&mut rendered.service, &mut |path, value| {
        render_text(value, &scope)
            .map_err(|e| format!("Bad evaluation for '{value}' in Service{path}: {e}"))
    })?;
    if template.template.remove_empty_tags {
        if let Some(tags) = rendered.service.tags.as_mut() {
            tags.retain(|t| !t.is_empty());
        }
    }
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(name: &str, regexp: &str, service: &str) -> PreparedQuery {
        let mut q = PreparedQuery {
            name: name.into(),
            ..Default::default()
        };
        q.template.kind = TEMPLATE_NAME_PREFIX_MATCH.into();
        q.template.regexp = regexp.into();
        q.service.service = service.into();
        q
    }

    #[test]
    fn names_and_matches_render() {
        let mut t = template("geo-db", r"^geo-db-(.*?)-([^\-]+?)$", "mysql-${match(1)}");
        t.service.tags = Some(vec![
            "${match(2)}".into(),
            "${name.suffix}".into(),
            "x".into(),
        ]);
        t.service.near = "${name.full}/${name.prefix}".into();
        compile(&t).unwrap();
        let r = render(&t, "geo-db-customer-primary").unwrap();
        assert_eq!(r.service.service, "mysql-customer");
        assert_eq!(
            r.service.tags.unwrap(),
            vec!["primary", "-customer-primary", "x"]
        );
        assert_eq!(r.service.near, "geo-db-customer-primary/geo-db");
        // No match: the groups are empty, as are groups past the last.
        let r = render(&t, "geo-db").unwrap();
        assert_eq!(r.service.service, "mysql-");
    }

    #[test]
    fn empty_tags_are_removed_when_asked() {
        let mut t = template("svc-", r"^svc-(\w+)(?:-(\w+))?$", "${match(1)}");
        t.service.tags = Some(vec!["${match(2)}".into()]);
        t.template.remove_empty_tags = true;
        assert_eq!(
            render(&t, "svc-web").unwrap().service.tags.unwrap(),
            Vec::<String>::new()
        );
        t.template.remove_empty_tags = false;
        assert_eq!(
            render(&t, "svc-web").unwrap().service.tags.unwrap(),
            vec![""]
        );
    }

    #[test]
    fn bad_templates_are_refused_with_consuls_texts() {
        let mut t = template("x", "", "${name.full}");
        t.template.kind = "prefix".into();
        assert_eq!(compile(&t).unwrap_err(), "Bad Template.Type 'prefix'");
        let t = template("x", "(", "${name.full}");
        assert!(compile(&t).unwrap_err().starts_with("Bad Regexp: "));
        // Unknown names parse and fail when evaluated, as HIL's do.
        let t = template("x", "", "${name.nope}");
        assert_eq!(
            compile(&t).unwrap_err(),
            "Bad evaluation for '${name.nope}' in Service.Service: unknown variable accessed: name.nope"
        );
        let mut t = template("x", "", "db");
        t.service.tags = Some(vec!["${upper(name.full)}".into()]);
        assert_eq!(
            compile(&t).unwrap_err(),
            "Bad evaluation for '${upper(name.full)}' in Service.Tags[0]: unknown function called: upper"
        );
        let t = template("x", "", "${name.full");
        assert!(compile(&t)
            .unwrap_err()
            .starts_with("Bad format '${name.full' in Service.Service: "));
        let t = template("x", "", "${}");
        assert!(compile(&t).unwrap_err().starts_with("Bad format '${}'"));
        let t = template("x", "", "$${literal}");
        assert_eq!(render(&t, "x").unwrap().service.service, "${literal}");
    }
}
