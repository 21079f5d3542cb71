//! The fence's part of a request's expressions, and where it meets the caller's part.

/// The placeholders fencelock uses in a fenced request; a caller's own placeholders may not
/// start with these.
pub(crate) const TOKEN_NAME: &str = "#fencelock_token";
pub(crate) const OWNER_NAME: &str = "#fencelock_owner";
pub(crate) const TOKEN_VALUE: &str = ":fencelock_token";
pub(crate) const OWNER_VALUE: &str = ":fencelock_owner";
pub(crate) const RESERVED: [&str; 2] = ["#fencelock_", ":fencelock_"];

/// The fence rule as a condition on the placeholders above: the item holds no fence, or an
/// older token, or (unless `strict`) the same token and owner.
pub(crate) fn fence_condition(strict: bool) -> String {
    let older = format!("attribute_not_exists({TOKEN_NAME}) OR {TOKEN_NAME} < {TOKEN_VALUE}");
    if strict {
        older
    } else {
        format!("{older} OR ({TOKEN_NAME} = {TOKEN_VALUE} AND {OWNER_NAME} = {OWNER_VALUE})")
    }
}

/// The fence condition and the caller's own, both of which must hold.
pub(crate) fn combined_condition(strict: bool, own: Option<&str>) -> String {
    let fence = fence_condition(strict);
    match own {
        Some(own) if !own.trim().is_empty() => format!("({fence}) AND ({own})"),
        _ => fence,
    }
}

/// `expression` with the fence's assignments added to its `SET` clause (an update
/// expression may hold each clause once), or a `SET` clause of its own in front.
pub(crate) fn with_fence_set(expression: &str) -> String {
    let assignments = format!("{TOKEN_NAME} = {TOKEN_VALUE}, {OWNER_NAME} = {OWNER_VALUE}");
    match find_word(expression, "SET") {
        Some(at) => {
            let end = at + "SET".len();
            format!(
                "{} {assignments},{}",
                &expression[..end],
                &expression[end..]
            )
        }
        None if expression.trim().is_empty() => format!("SET {assignments}"),
        None => format!("SET {assignments} {expression}"),
    }
}

/// Whether `c` continues a name or a placeholder in an expression.
fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Where `word` (ASCII, case-insensitive) stands alone in `expression`: not inside a longer
/// name, not a placeholder (`#word`, `:word`) and not a nested path part (`a.word`).
/// DynamoDB expressions have no string literals (values are placeholders), so every such
/// occurrence is a keyword or an attribute name.
pub(crate) fn find_word(expression: &str, word: &str) -> Option<usize> {
    let lower = expression.to_ascii_lowercase();
    let word = word.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find(&word) {
        let at = from + found;
        let end = at + word.len();
        let before = lower[..at].chars().next_back();
        let after = lower[end..].chars().next();
        let alone_before = before.is_none_or(|c| !(word_char(c) || matches!(c, '#' | ':' | '.')));
        let alone_after = after.is_none_or(|c| !word_char(c));
        if alone_before && alone_after {
            return Some(at);
        }
        from = at + word.len().max(1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_joins_an_existing_set_clause() {
        let merged = with_fence_set("set #b = #b - :d REMOVE #flag");
        assert_eq!(
            merged,
            "set #fencelock_token = :fencelock_token, #fencelock_owner = :fencelock_owner, \
             #b = #b - :d REMOVE #flag"
        );
        assert_eq!(
            with_fence_set("REMOVE #flag"),
            "SET #fencelock_token = :fencelock_token, #fencelock_owner = :fencelock_owner \
             REMOVE #flag"
        );
        assert_eq!(
            with_fence_set(" "),
            "SET #fencelock_token = :fencelock_token, #fencelock_owner = :fencelock_owner"
        );
    }

    #[test]
    fn a_placeholder_or_a_longer_name_is_not_the_word() {
        assert_eq!(find_word("ADD #set :set", "set"), None);
        assert_eq!(find_word("ADD settings :v", "set"), None);
        assert_eq!(find_word("ADD a.set :v", "set"), None);
        assert_eq!(find_word("REMOVE x SET y = :y", "set"), Some(9));
        assert_eq!(
            find_word("fencelock_token < :t", "fencelock_token"),
            Some(0)
        );
    }

    #[test]
    fn the_caller_condition_must_hold_too() {
        assert_eq!(
            combined_condition(true, Some("#s <> :done")),
            "(attribute_not_exists(#fencelock_token) OR #fencelock_token < :fencelock_token) \
             AND (#s <> :done)"
        );
        assert_eq!(combined_condition(true, None), fence_condition(true));
    }
}
