//! `acl.down_policy`: what a token gets when the servers that would
//! resolve it cannot be reached (Consul's four policies).

use crate::DefaultPolicy;

/// `acl.down_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DownPolicy {
    /// `allow`: everything the `allow` default policy grants.
    Allow,
    /// `deny`: nothing.
    Deny,
    /// `extend-cache` (the default): the last answer, however old; with
    /// none, the default policy.
    #[default]
    ExtendCache,
    /// `async-cache`: as `extend-cache`, and a stale answer is served at
    /// once while a fresh one is fetched in the background.
    AsyncCache,
}

/// What a down policy answers for one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownAnswer<T> {
    /// The last answer resolved for the token.
    Stale(T),
    /// No token: this default policy decides everything.
    Static(DefaultPolicy),
}

impl DownPolicy {
    /// The policy a configuration value names (`None` for anything else).
    pub fn parse(value: &str) -> Option<DownPolicy> {
        match value {
            "allow" => Some(DownPolicy::Allow),
            "deny" => Some(DownPolicy::Deny),
            "extend-cache" => Some(DownPolicy::ExtendCache),
            "async-cache" => Some(DownPolicy::AsyncCache),
            _ => None,
        }
    }

    /// The configuration value of this policy.
    pub fn as_str(self) -> &'static str {
        match self {
            DownPolicy::Allow => "allow",
            DownPolicy::Deny => "deny",
            DownPolicy::ExtendCache => "extend-cache",
            DownPolicy::AsyncCache => "async-cache",
        }
    }

    /// What a token whose resolution failed gets: `stale` is the last
    /// answer held for it, `default` the configured default policy.
    pub fn answer<T>(self, stale: Option<T>, default: DefaultPolicy) -> DownAnswer<T> {
        match (self, stale) {
            (DownPolicy::Allow, _) => DownAnswer::Static(DefaultPolicy::Allow),
            (DownPolicy::Deny, _) => DownAnswer::Static(DefaultPolicy::Deny),
            (_, Some(stale)) => DownAnswer::Stale(stale),
            (_, None) => DownAnswer::Static(default),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_answers_as_consul() {
        use DefaultPolicy as D;
        assert_eq!(
            DownPolicy::Allow.answer(Some(1), D::Deny),
            DownAnswer::Static(D::Allow)
        );
        assert_eq!(
            DownPolicy::Deny.answer(Some(1), D::Allow),
            DownAnswer::Static(D::Deny)
        );
        assert_eq!(
            DownPolicy::ExtendCache.answer(Some(1), D::Deny),
            DownAnswer::Stale(1)
        );
        assert_eq!(
            DownPolicy::AsyncCache.answer(Some(1), D::Deny),
            DownAnswer::Stale(1)
        );
        assert_eq!(
            DownPolicy::ExtendCache.answer::<u8>(None, D::Deny),
            DownAnswer::Static(D::Deny)
        );
        for value in ["allow", "deny", "extend-cache", "async-cache"] {
            assert_eq!(
                DownPolicy::parse(value).map(DownPolicy::as_str),
                Some(value)
            );
        }
        assert_eq!(DownPolicy::parse("sometimes"), None);
    }
}
