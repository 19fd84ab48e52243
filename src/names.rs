//! The names the checks take (arms, arithmetics, activations, sum
//! roundings): one parser, so that an error always lists exactly the
//! names that parse, in their declared order.

/// The item of `all` whose `name` is `s` (ASCII case ignored when
/// `any_case`: arms are written `"RAND"` or `"rand"`).
///
/// # Errors
/// `{what} "{s}": expected "a", "b" or "c"`, listing `all`'s names.
pub fn parse_named<T: Copy>(
    what: &str,
    s: &str,
    all: &[T],
    name: impl Fn(T) -> &'static str,
    any_case: bool,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|&t| {
            let n = name(t);
            if any_case {
                n.eq_ignore_ascii_case(s)
            } else {
                n == s
            }
        })
        .ok_or_else(|| {
            let names: Vec<String> = all.iter().map(|&t| format!("{:?}", name(t))).collect();
            let list = match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                Some((last, _)) => last.clone(),
                None => String::from("(none)"),
            };
            format!("{what} {s:?}: expected {list}")
        })
}

#[cfg(test)]
mod tests {
    use super::parse_named;

    fn name(i: u8) -> &'static str {
        ["RAND", "TIES", "SKEW"][usize::from(i)]
    }

    #[test]
    fn finds_and_lists() {
        assert_eq!(parse_named("arm", "ties", &[0, 1, 2], name, true), Ok(1));
        assert!(parse_named("arm", "ties", &[0, 1, 2], name, false).is_err());
        assert_eq!(
            parse_named("arm", "X", &[0, 1, 2], name, true),
            Err("arm \"X\": expected \"RAND\", \"TIES\" or \"SKEW\"".to_string())
        );
        assert_eq!(
            parse_named("arm", "X", &[0], name, true),
            Err("arm \"X\": expected \"RAND\"".to_string())
        );
    }
}
