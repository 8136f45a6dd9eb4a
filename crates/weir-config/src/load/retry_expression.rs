//! `buffering.retry_expression`: vulcand/predicate's grammar (Go expressions: `&&`, `||`,
//! parentheses, comparisons of a function's value with a constant on its right) over oxy
//! buffer's functions `IsNetworkError()`, `Attempts()`, `ResponseCode()`, `RequestMethod()`.

use crate::model::{Comparison, RetryExpression, RetryValue};

/// The parsed expression, or what is wrong with it.
pub(super) fn parse(text: &str) -> Result<RetryExpression, String> {
    let tokens = tokenize(text)?;
    let mut parser = Parser { tokens, at: 0 };
    let expression = parser.or()?;
    match parser.tokens.get(parser.at) {
        None => Ok(expression),
        Some(token) => Err(format!("unexpected `{}`", token.text())),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// A function's name, with its `()`.
    Call(String),
    Number(i64),
    Text(String),
    Op(&'static str),
}

impl Token {
    fn text(&self) -> String {
        match self {
            Token::Call(name) => format!("{name}()"),
            Token::Number(n) => n.to_string(),
            Token::Text(text) => format!("{text:?}"),
            Token::Op(op) => op.to_string(),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    const OPS: [&str; 10] = ["&&", "||", "==", "!=", "<=", ">=", "<", ">", "(", ")"];
    let mut tokens = Vec::new();
    let mut rest = text.trim_start();
    while let Some(c) = rest.chars().next() {
        if let Some(op) = OPS.iter().find(|op| rest.starts_with(**op)) {
            tokens.push(Token::Op(op));
            rest = &rest[op.len()..];
        } else if c.is_ascii_digit() {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let number = rest[..end]
                .parse()
                .map_err(|_| format!("`{}` is too large a number", &rest[..end]))?;
            tokens.push(Token::Number(number));
            rest = &rest[end..];
        } else if c == '"' || c == '`' {
            // Go's string literals; escapes are not needed for method names.
            let end = rest[1..]
                .find(c)
                .ok_or_else(|| format!("a string starting with {c} is not closed"))?;
            let inner = &rest[1..1 + end];
            if c == '"' && inner.contains('\\') {
                return Err("escapes in strings are not supported".into());
            }
            tokens.push(Token::Text(inner.to_string()));
            rest = &rest[end + 2..];
        } else if c.is_ascii_alphabetic() {
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            let name = &rest[..end];
            let after = rest[end..].trim_start();
            let Some(after) = after.strip_prefix('(').map(str::trim_start) else {
                return Err(format!("`{name}` must be called: `{name}()`"));
            };
            let Some(after) = after.strip_prefix(')') else {
                return Err(format!("`{name}()` takes no arguments"));
            };
            tokens.push(Token::Call(name.to_string()));
            rest = after;
        } else {
            return Err(format!("unexpected `{c}`"));
        }
        rest = rest.trim_start();
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn eat(&mut self, op: &'static str) -> bool {
        if self.tokens.get(self.at) == Some(&Token::Op(op)) {
            self.at += 1;
            return true;
        }
        false
    }

    fn or(&mut self) -> Result<RetryExpression, String> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = RetryExpression::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<RetryExpression, String> {
        let mut left = self.comparison()?;
        while self.eat("&&") {
            left = RetryExpression::And(Box::new(left), Box::new(self.comparison()?));
        }
        Ok(left)
    }

    /// A parenthesized expression, `IsNetworkError()`, or a function compared with a constant.
    fn comparison(&mut self) -> Result<RetryExpression, String> {
        let value = match self.next() {
            Some(Token::Op("(")) => {
                let inner = self.or()?;
                if !self.eat(")") {
                    return Err("a `(` is not closed".into());
                }
                return Ok(inner);
            }
            Some(Token::Call(name)) => match name.as_str() {
                "IsNetworkError" => return Ok(RetryExpression::IsNetworkError),
                "Attempts" => RetryValue::Attempts,
                "ResponseCode" => RetryValue::ResponseCode,
                "RequestMethod" => RetryValue::RequestMethod,
                _ => {
                    return Err(format!(
                        "unknown function `{name}()`; expected IsNetworkError(), Attempts(), \
                         ResponseCode() or RequestMethod()"
                    ))
                }
            },
            Some(token) => {
                return Err(format!(
                    "expected a function such as `Attempts()`, found `{}`",
                    token.text()
                ))
            }
            None => return Err("the expression ends early".into()),
        };
        let comparison = match self.next() {
            Some(Token::Op("==")) => Comparison::Eq,
            Some(Token::Op("!=")) => Comparison::Ne,
            Some(Token::Op("<")) => Comparison::Lt,
            Some(Token::Op(">")) => Comparison::Gt,
            Some(Token::Op("<=")) => Comparison::Le,
            Some(Token::Op(">=")) => Comparison::Ge,
            _ => return Err("a function's value must be compared: `Attempts() <= 2`".into()),
        };
        let constant = match (&value, self.next()) {
            (RetryValue::RequestMethod, Some(Token::Text(text))) => RetryValue::Text(text),
            (RetryValue::RequestMethod, _) => {
                return Err("`RequestMethod()` is compared with a string: `\"GET\"`".into())
            }
            (_, Some(Token::Number(n))) => RetryValue::Number(n),
            _ => return Err("`Attempts()` and `ResponseCode()` are compared with a number".into()),
        };
        if value == RetryValue::RequestMethod
            && !matches!(comparison, Comparison::Eq | Comparison::Ne)
        {
            return Err("`RequestMethod()` is only compared with `==` or `!=`".into());
        }
        Ok(RetryExpression::Compare(value, comparison, constant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RetryExpression::*;

    #[test]
    fn oxy_expressions() {
        // oxy's retry_test.go and Traefik's documentation example.
        assert_eq!(
            parse("IsNetworkError() && Attempts() <= 2"),
            Ok(And(
                Box::new(IsNetworkError),
                Box::new(Compare(
                    RetryValue::Attempts,
                    Comparison::Le,
                    RetryValue::Number(2)
                ))
            ))
        );
        assert_eq!(
            parse("(ResponseCode() == 503 || IsNetworkError()) && RequestMethod() == `GET`"),
            Ok(And(
                Box::new(Or(
                    Box::new(Compare(
                        RetryValue::ResponseCode,
                        Comparison::Eq,
                        RetryValue::Number(503)
                    )),
                    Box::new(IsNetworkError)
                )),
                Box::new(Compare(
                    RetryValue::RequestMethod,
                    Comparison::Eq,
                    RetryValue::Text("GET".into())
                ))
            ))
        );
        // `||` binds looser than `&&`, as in Go.
        assert!(matches!(
            parse("IsNetworkError() || Attempts() < 2 && ResponseCode() != 500"),
            Ok(Or(_, _))
        ));
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "Attempts()",
            "Attempts() <= \"2\"",
            "RequestMethod() == 1",
            "RequestMethod() < \"GET\"",
            "2 >= Attempts()",
            "IsNetworkError",
            "IsNetworkError(1)",
            "Foo() == 1",
            "!IsNetworkError()",
            "(IsNetworkError()",
            "IsNetworkError() &&",
            "IsNetworkError() IsNetworkError()",
            "Attempts() == 99999999999999999999",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
