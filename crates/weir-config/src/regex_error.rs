//! The regex crate's errors on one line: it draws a syntax error over several (the pattern, a
//! caret under the offending character, the reason), and `weir check` prints one line per error.

/// `unclosed group (at character 4)`: the reason, and where in the pattern when regex shows it.
pub(crate) fn one_line(error: &regex::Error) -> String {
    let text = error.to_string();
    let lines: Vec<&str> = text.lines().collect();
    let reason = lines.iter().rev().find_map(|l| l.strip_prefix("error: "));
    // A one-line pattern is drawn as: a heading, the pattern and the caret line under it, each
    // indented four spaces, then the reason.
    let caret = match lines.as_slice() {
        [_, _, caret, _] if !caret.trim().is_empty() && caret.trim().chars().all(|c| c == '^') => {
            Some(caret.len() - caret.trim_start().len())
        }
        _ => None,
    };
    match (reason, caret) {
        (Some(reason), Some(indent)) if indent >= 4 => {
            format!("{reason} (at character {})", indent - 4 + 1)
        }
        (Some(reason), _) => reason.to_string(),
        _ => lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(pattern: &str) -> String {
        one_line(&regex::Regex::new(pattern).unwrap_err())
    }

    #[test]
    fn a_syntax_error_is_one_line_with_its_place() {
        assert_eq!(message("("), "unclosed group (at character 1)");
        assert_eq!(message("/b/("), "unclosed group (at character 4)");
        assert_eq!(
            message("a{2"),
            "unclosed counted repetition (at character 2)"
        );
        assert_eq!(
            message("x\\q"),
            "unrecognized escape sequence (at character 2)"
        );
        // The pattern's own `^` is not the caret.
        assert_eq!(message("^(.*"), "unclosed group (at character 2)");
    }

    #[test]
    fn a_pattern_too_large_is_one_line_too() {
        let error = regex::RegexBuilder::new("a{1000}{1000}")
            .size_limit(1000)
            .build()
            .unwrap_err();
        let line = one_line(&error);
        assert!(
            !line.contains('\n') && line.contains("size limit"),
            "{line}"
        );
    }
}
