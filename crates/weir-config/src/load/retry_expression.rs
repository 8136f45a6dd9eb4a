//! `buffering.retry_expression`: vulcand/predicate's grammar (read by `crate::predicate`) over
//! oxy buffer's functions `IsNetworkError()`, `Attempts()`, `ResponseCode()`, `RequestMethod()`,
//! each compared with a constant of its type on its right; errors carry the byte offset in the
//! expression.

use crate::model::{Comparison, RetryExpression, RetryValue};
use crate::predicate::{refuse, ExpressionError, Language, Operator, Tree};

const FUNCTIONS: &str = "IsNetworkError(), Attempts(), ResponseCode() or RequestMethod()";

const LANGUAGE: Language = Language {
    noun: "function",
    example: "Attempts() <= 2",
    functions: FUNCTIONS,
    constants: "a constant",
    strings: true,
};

/// The parsed expression, or what is wrong with it and where.
pub(super) fn parse(text: &str) -> Result<RetryExpression, ExpressionError> {
    expression(&crate::predicate::parse(text, &LANGUAGE)?)
}

/// What a call names.
enum Function {
    IsNetworkError,
    Value(RetryValue),
}

fn expression(tree: &Tree<'_>) -> Result<RetryExpression, ExpressionError> {
    match tree.bare() {
        Tree::Binary {
            op: Operator::And,
            left,
            right,
            ..
        } => Ok(RetryExpression::And(
            Box::new(expression(left)?),
            Box::new(expression(right)?),
        )),
        Tree::Binary {
            op: Operator::Or,
            left,
            right,
            ..
        } => Ok(RetryExpression::Or(
            Box::new(expression(left)?),
            Box::new(expression(right)?),
        )),
        Tree::Binary {
            op: Operator::Compare(comparison),
            left,
            right,
            at,
        } => compare(left, *comparison, right, *at),
        Tree::Call { name, args, at } => match function(name, args, *at)? {
            Function::IsNetworkError => Ok(RetryExpression::IsNetworkError),
            Function::Value(_) => refuse(
                *at,
                "a function's value must be compared: `Attempts() <= 2`",
            ),
        },
        other => LANGUAGE.not_a_comparison(other),
    }
}

/// The function `name` names; none takes arguments.
fn function(name: &str, args: &[Tree<'_>], at: usize) -> Result<Function, ExpressionError> {
    let function = match name {
        "IsNetworkError" => Function::IsNetworkError,
        "Attempts" => Function::Value(RetryValue::Attempts),
        "ResponseCode" => Function::Value(RetryValue::ResponseCode),
        "RequestMethod" => Function::Value(RetryValue::RequestMethod),
        _ => {
            return refuse(
                at,
                format!("unknown function `{name}()`; expected {FUNCTIONS}"),
            )
        }
    };
    if !args.is_empty() {
        return refuse(at, format!("`{name}()` takes no arguments"));
    }
    Ok(function)
}

/// A function's value compared with a constant of its type.
fn compare(
    left: &Tree<'_>,
    comparison: Comparison,
    right: &Tree<'_>,
    op_at: usize,
) -> Result<RetryExpression, ExpressionError> {
    let (name, args, at) = LANGUAGE.callee(left, Operator::Compare(comparison), op_at)?;
    let value = match function(name, args, at)? {
        Function::IsNetworkError => {
            return refuse(op_at, "`IsNetworkError()` is not compared: it holds or not")
        }
        Function::Value(value) => value,
    };
    let right = right.bare();
    let constant = match (&value, right) {
        (RetryValue::RequestMethod, Tree::Text(text, _)) => RetryValue::Text(text.to_string()),
        (RetryValue::RequestMethod, other) => {
            return refuse(
                other.at(),
                "`RequestMethod()` is compared with a string: `\"GET\"`",
            )
        }
        (_, Tree::Whole(n, _)) => RetryValue::Number(*n),
        (_, other) => {
            return refuse(
                other.at(),
                format!("`{name}()` is compared with a whole number like `2`"),
            )
        }
    };
    if value == RetryValue::RequestMethod
        && !matches!(comparison, Comparison::Equal | Comparison::NotEqual)
    {
        return refuse(
            op_at,
            "`RequestMethod()` is only compared with `==` or `!=`",
        );
    }
    Ok(RetryExpression::Compare(value, comparison, constant))
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
                    Comparison::LessOrEqual,
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
                        Comparison::Equal,
                        RetryValue::Number(503)
                    )),
                    Box::new(IsNetworkError)
                )),
                Box::new(Compare(
                    RetryValue::RequestMethod,
                    Comparison::Equal,
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

    /// Each refusal at the offset of its cause, as `weir check` points at it.
    #[test]
    fn refusals_point_into_the_expression() {
        let cases: &[(&str, usize, &str)] = &[
            ("", 0, "ends too soon; expected IsNetworkError(), Attempts(), ResponseCode() or RequestMethod(), or a constant"),
            ("Attempts()", 0, "a function's value must be compared: `Attempts() <= 2`"),
            ("IsNetworkError() && Attempts() <", 32, "ends too soon; expected IsNetworkError(), Attempts(), ResponseCode() or RequestMethod(), or a constant"),
            ("Attempts() <= \"2\"", 14, "`Attempts()` is compared with a whole number like `2`"),
            ("ResponseCode() != 5.0e2", 18, "`ResponseCode()` is compared with a whole number like `2`"),
            ("RequestMethod() == 1", 19, "`RequestMethod()` is compared with a string: `\"GET\"`"),
            ("RequestMethod() < `GET`", 16, "`RequestMethod()` is only compared with `==` or `!=`"),
            ("2 >= Attempts()", 0, "expected a function left of `>=`, found the number `2`: the function goes first, as in `Attempts() <= 2`"),
            ("IsNetworkError() == 1", 17, "`IsNetworkError()` is not compared: it holds or not"),
            ("IsNetworkError(1)", 0, "`IsNetworkError()` takes no arguments"),
            ("IsNetworkError() || Foo() == 1", 20, "unknown function `Foo()`; expected IsNetworkError(), Attempts(), ResponseCode() or RequestMethod()"),
            ("!IsNetworkError()", 0, "`!` is not supported: a function is compared with a constant by `>`, `>=`, `<`, `<=`, `==` or `!=`, and comparisons are joined by `&&` and `||`"),
            ("(IsNetworkError()", 0, "this `(` is not closed"),
            ("IsNetworkError() IsNetworkError()", 17, "unexpected `IsNetworkError`"),
            ("RequestMethod() == \"GET", 19, "a string starting with \" is not closed"),
            ("RequestMethod() == \"G\\ET\"", 21, "escapes in strings are not supported"),
            ("\"GET\"", 0, "expected a comparison like `Attempts() <= 2`, found the string \"GET\""),
        ];
        for (text, offset, message) in cases {
            let e = parse(text).expect_err(text);
            assert_eq!(
                (e.offset, e.message.as_str()),
                (*offset, *message),
                "{text}"
            );
        }
        // Parentheses around either side, as predicate reads them.
        assert_eq!(parse("(Attempts()) < (2)"), parse("Attempts() < 2"),);
    }
}
