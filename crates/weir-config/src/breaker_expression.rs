//! The `circuit_breaker` middleware's `expression`: Traefik's language (vulcand/oxy's cbreaker
//! predicates, read by vulcand/predicate as a Go expression). A metric compared with a
//! constant (`NetworkErrorRatio() > 0.5`), comparisons joined by `&&` and `||`, parentheses.
//! As there, the constant goes right of the metric and has the metric's type: a ratio takes a
//! decimal number (`0.5`), a latency or a count a whole one (`100`); `LatencyAtQuantileMS`
//! takes a decimal quantile (`50.0`) and `ResponseCodeRatio` four whole statuses. Errors carry
//! the byte offset in the expression.

use std::fmt;

/// A parsed expression: when it holds, the breaker trips.
#[derive(Debug, Clone, PartialEq)]
pub enum BreakerCondition {
    And(Box<BreakerCondition>, Box<BreakerCondition>),
    Or(Box<BreakerCondition>, Box<BreakerCondition>),
    Compare {
        metric: BreakerMetric,
        op: Comparison,
        value: Threshold,
    },
}

impl BreakerCondition {
    /// Whether the condition holds, each metric's value read by `read` (both operands of
    /// `&&` and `||` short-circuit, as oxy's do).
    pub fn holds(&self, read: &mut impl FnMut(&BreakerMetric) -> Threshold) -> bool {
        match self {
            BreakerCondition::And(a, b) => a.holds(read) && b.holds(read),
            BreakerCondition::Or(a, b) => a.holds(read) || b.holds(read),
            BreakerCondition::Compare { metric, op, value } => {
                let ordering = match (read(metric), value) {
                    (Threshold::Ratio(found), Threshold::Ratio(limit)) => found.partial_cmp(limit),
                    (Threshold::Whole(found), Threshold::Whole(limit)) => Some(found.cmp(limit)),
                    _ => None,
                };
                ordering.is_some_and(|o| op.admits(o))
            }
        }
    }

    /// Whether some comparison reads `LatencyAtQuantileMS` (only then are latencies merged).
    pub fn reads_latency(&self) -> bool {
        match self {
            BreakerCondition::And(a, b) | BreakerCondition::Or(a, b) => {
                a.reads_latency() || b.reads_latency()
            }
            BreakerCondition::Compare { metric, .. } => {
                matches!(metric, BreakerMetric::LatencyAtQuantileMs(_))
            }
        }
    }
}

/// What an expression measures, over the breaker's rolling window.
#[derive(Debug, Clone, PartialEq)]
pub enum BreakerMetric {
    /// Answers 502 and 504 over all answers (a ratio).
    NetworkErrorRatio,
    /// Answers with a status in `from..to` over those in `divided_from..divided_to`; 0 when
    /// none is in the second range (a ratio).
    ResponseCodeRatio {
        from: i64,
        to: i64,
        divided_from: i64,
        divided_to: i64,
    },
    /// The latency at this percentile (`50.0` is the median), in whole milliseconds.
    LatencyAtQuantileMs(f64),
    /// How many answers the window holds.
    RequestThreshold,
}

impl BreakerMetric {
    /// Whether the metric is a ratio (compared with a decimal number) or whole.
    fn is_ratio(&self) -> bool {
        matches!(
            self,
            BreakerMetric::NetworkErrorRatio | BreakerMetric::ResponseCodeRatio { .. }
        )
    }
}

/// A metric's value or the constant it is compared with: Go's `float64` or `int`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Ratio(f64),
    Whole(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
    Equal,
    NotEqual,
}

impl Comparison {
    fn admits(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            Comparison::Greater => ordering == Greater,
            Comparison::GreaterOrEqual => ordering != Less,
            Comparison::Less => ordering == Less,
            Comparison::LessOrEqual => ordering != Greater,
            Comparison::Equal => ordering == Equal,
            Comparison::NotEqual => ordering != Equal,
        }
    }
}

/// Why an expression is refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpressionError {
    /// Byte offset into the expression.
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for ExpressionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {}: {}", self.offset, self.message)
    }
}

const METRICS: &str = "NetworkErrorRatio(), ResponseCodeRatio(from, to, dividedFrom, \
                       dividedTo), LatencyAtQuantileMS(quantile) or RequestThreshold()";

fn refuse<T>(offset: usize, message: impl Into<String>) -> Result<T, ExpressionError> {
    Err(ExpressionError {
        offset,
        message: message.into(),
    })
}

/// Parses `text` into the condition the breaker checks.
pub fn parse(text: &str) -> Result<BreakerCondition, ExpressionError> {
    if text.trim().is_empty() {
        return refuse(0, format!("is empty; expected a comparison of {METRICS}"));
    }
    let tokens = tokenize(text)?;
    let mut parser = Parser {
        tokens: &tokens,
        next: 0,
        end: text.len(),
    };
    let tree = parser.expression(1)?;
    if let Some(token) = parser.peek() {
        return refuse(token.at, format!("unexpected {}", token.kind));
    }
    condition(&tree)
}

#[derive(Debug, Clone, PartialEq)]
enum TokenKind<'t> {
    Name(&'t str),
    Whole(i64),
    Decimal(f64),
    Open,
    Close,
    Comma,
    /// `&&`, `||` and the comparisons.
    Operator(&'static str),
    /// A Go operator the language does not have (`+`, `!`, `&`, `=`...).
    Unsupported(&'t str),
}

impl fmt::Display for TokenKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenKind::Name(name) => write!(f, "`{name}`"),
            TokenKind::Whole(n) => write!(f, "`{n}`"),
            TokenKind::Decimal(n) => write!(f, "`{n:?}`"),
            TokenKind::Open => f.write_str("`(`"),
            TokenKind::Close => f.write_str("`)`"),
            TokenKind::Comma => f.write_str("`,`"),
            TokenKind::Operator(op) | TokenKind::Unsupported(op) => write!(f, "`{op}`"),
        }
    }
}

#[derive(Debug)]
struct Token<'t> {
    kind: TokenKind<'t>,
    at: usize,
}

fn tokenize(text: &str) -> Result<Vec<Token<'_>>, ExpressionError> {
    const OPERATORS: [&str; 8] = ["&&", "||", ">=", "<=", "==", "!=", ">", "<"];
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &text[at..];
        let b = bytes[at];
        let (kind, len) = if b.is_ascii_whitespace() {
            at += 1;
            continue;
        } else if b.is_ascii_alphabetic() || b == b'_' {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (TokenKind::Name(&rest[..len]), len)
        } else if b.is_ascii_digit()
            || (b == b'.' && bytes.get(at + 1).is_some_and(u8::is_ascii_digit))
        {
            number(rest, at)?
        } else if let Some(op) = OPERATORS.iter().find(|op| rest.starts_with(**op)) {
            (TokenKind::Operator(op), op.len())
        } else {
            match b {
                b'(' => (TokenKind::Open, 1),
                b')' => (TokenKind::Close, 1),
                b',' => (TokenKind::Comma, 1),
                b'+' | b'-' | b'*' | b'/' | b'%' | b'!' | b'&' | b'|' | b'^' | b'=' => {
                    (TokenKind::Unsupported(&rest[..1]), 1)
                }
                _ => {
                    let c = rest.chars().next().unwrap_or('?');
                    return refuse(at, format!("unexpected `{c}`"));
                }
            }
        };
        tokens.push(Token { kind, at });
        at += len;
    }
    Ok(tokens)
}

/// A number as Go's scanner reads it and vulcand/predicate converts it: digits alone are a
/// whole number (`int`), with a point or an exponent a decimal one (`float64`). Go's other
/// spellings (`0x1F`, `1_000`) are refused, as predicate's `strconv.Atoi` refuses them.
fn number(rest: &str, at: usize) -> Result<(TokenKind<'_>, usize), ExpressionError> {
    let bytes = rest.as_bytes();
    let digits = |from: usize| {
        from + bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut len = digits(0);
    let mut decimal = false;
    if bytes.get(len) == Some(&b'.') {
        decimal = true;
        len = digits(len + 1);
    }
    if matches!(bytes.get(len), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(len + 1), Some(b'+' | b'-')));
        let end = digits(len + 1 + sign);
        if end > len + 1 + sign {
            decimal = true;
            len = end;
        }
    }
    let word_end = len
        + bytes[len..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'.')
            .count();
    let written = &rest[..word_end];
    let kind = if word_end > len {
        None
    } else if decimal {
        written.parse().ok().map(TokenKind::Decimal)
    } else {
        written.parse().ok().map(TokenKind::Whole)
    };
    match kind {
        Some(kind) => Ok((kind, len)),
        None => refuse(
            at,
            format!("`{written}` is not a number like `100` or `0.5`"),
        ),
    }
}

/// The expression as written, before types are checked.
#[derive(Debug)]
enum Tree<'t> {
    Call {
        name: &'t str,
        args: Vec<Tree<'t>>,
        at: usize,
    },
    Whole(i64, usize),
    Decimal(f64, usize),
    Binary {
        op: &'static str,
        left: Box<Tree<'t>>,
        right: Box<Tree<'t>>,
        at: usize,
    },
    Parens(Box<Tree<'t>>, usize),
}

impl Tree<'_> {
    fn at(&self) -> usize {
        match self {
            Tree::Call { at, .. }
            | Tree::Whole(_, at)
            | Tree::Decimal(_, at)
            | Tree::Parens(_, at) => *at,
            Tree::Binary { left, .. } => left.at(),
        }
    }

    /// What the tree is, for an error.
    fn describe(&self) -> String {
        match self {
            Tree::Call { name, .. } => format!("the metric `{name}()` alone"),
            Tree::Whole(n, _) => format!("the number `{n}`"),
            Tree::Decimal(n, _) => format!("the number `{n:?}`"),
            Tree::Binary { op, .. } => format!("a `{op}` expression"),
            Tree::Parens(inner, _) => inner.describe(),
        }
    }
}

/// Go's precedence: `||` below `&&` below the comparisons.
fn precedence(op: &str) -> u8 {
    match op {
        "||" => 1,
        "&&" => 2,
        _ => 3,
    }
}

struct Parser<'p, 't> {
    tokens: &'p [Token<'t>],
    next: usize,
    end: usize,
}

impl<'t> Parser<'_, 't> {
    fn peek(&self) -> Option<&Token<'t>> {
        self.tokens.get(self.next)
    }

    fn take(&mut self) -> Option<&Token<'t>> {
        let token = self.tokens.get(self.next);
        self.next += 1;
        token
    }

    /// Operators of `min` precedence and above, left-associative.
    fn expression(&mut self, min: u8) -> Result<Tree<'t>, ExpressionError> {
        let mut left = self.operand()?;
        while let Some(token) = self.peek() {
            let op = match &token.kind {
                TokenKind::Operator(op) => *op,
                TokenKind::Unsupported(op) => return refuse(token.at, unsupported(op)),
                _ => break,
            };
            if precedence(op) < min {
                break;
            }
            let at = token.at;
            self.next += 1;
            let right = self.expression(precedence(op) + 1)?;
            left = Tree::Binary {
                op,
                left: Box::new(left),
                right: Box::new(right),
                at,
            };
        }
        Ok(left)
    }

    fn operand(&mut self) -> Result<Tree<'t>, ExpressionError> {
        let end = self.end;
        let Some(token) = self.take() else {
            return refuse(
                end,
                format!("ends too soon; expected {METRICS}, or a number"),
            );
        };
        let at = token.at;
        match &token.kind {
            TokenKind::Whole(n) => Ok(Tree::Whole(*n, at)),
            TokenKind::Decimal(n) => Ok(Tree::Decimal(*n, at)),
            TokenKind::Open => {
                let inner = self.expression(1)?;
                self.expect_close(at)?;
                Ok(Tree::Parens(Box::new(inner), at))
            }
            TokenKind::Name(name) => {
                let name = *name;
                if self.peek().map(|t| &t.kind) != Some(&TokenKind::Open) {
                    return refuse(
                        at,
                        format!(
                            "`{name}` is not defined; expected {METRICS}, called with parentheses"
                        ),
                    );
                }
                self.next += 1;
                let mut args = Vec::new();
                if self.peek().map(|t| &t.kind) == Some(&TokenKind::Close) {
                    self.next += 1;
                } else {
                    loop {
                        args.push(self.expression(1)?);
                        let end = self.end;
                        match self.take() {
                            Some(Token {
                                kind: TokenKind::Comma,
                                ..
                            }) => {}
                            Some(Token {
                                kind: TokenKind::Close,
                                ..
                            }) => break,
                            Some(other) => {
                                return refuse(
                                    other.at,
                                    format!("expected `,` or `)`, found {}", other.kind),
                                )
                            }
                            None => return refuse(end, format!("`{name}(` is not closed")),
                        }
                    }
                }
                Ok(Tree::Call { name, args, at })
            }
            TokenKind::Unsupported(op) => refuse(at, unsupported(op)),
            other => refuse(
                at,
                format!("expected {METRICS}, a number or `(`, found {other}"),
            ),
        }
    }

    fn expect_close(&mut self, open: usize) -> Result<(), ExpressionError> {
        match self.take() {
            Some(Token {
                kind: TokenKind::Close,
                ..
            }) => Ok(()),
            Some(other) => refuse(other.at, format!("expected `)`, found {}", other.kind)),
            None => refuse(open, "this `(` is not closed"),
        }
    }
}

fn unsupported(op: &str) -> String {
    format!(
        "`{op}` is not supported: a metric is compared with a constant by `>`, `>=`, `<`, \
         `<=`, `==` or `!=`, and comparisons are joined by `&&` and `||`"
    )
}

/// The parsed tree as a condition, its types checked as oxy's operators check them.
fn condition(tree: &Tree<'_>) -> Result<BreakerCondition, ExpressionError> {
    match tree {
        Tree::Parens(inner, _) => condition(inner),
        Tree::Binary {
            op,
            left,
            right,
            at,
        } => match *op {
            "&&" => Ok(BreakerCondition::And(
                Box::new(condition(left)?),
                Box::new(condition(right)?),
            )),
            "||" => Ok(BreakerCondition::Or(
                Box::new(condition(left)?),
                Box::new(condition(right)?),
            )),
            _ => {
                let metric = metric(left, op, *at)?;
                let value = constant(right, &metric)?;
                let op = match *op {
                    ">" => Comparison::Greater,
                    ">=" => Comparison::GreaterOrEqual,
                    "<" => Comparison::Less,
                    "<=" => Comparison::LessOrEqual,
                    "==" => Comparison::Equal,
                    _ => Comparison::NotEqual,
                };
                Ok(BreakerCondition::Compare { metric, op, value })
            }
        },
        other => refuse(
            other.at(),
            format!(
                "expected a comparison like `NetworkErrorRatio() > 0.5`, found {}",
                other.describe()
            ),
        ),
    }
}

/// The left side of a comparison: a metric, with its arguments' types checked.
fn metric(tree: &Tree<'_>, op: &str, op_at: usize) -> Result<BreakerMetric, ExpressionError> {
    let (name, args, at) = match tree {
        Tree::Parens(inner, _) => return metric(inner, op, op_at),
        Tree::Call { name, args, at } => (*name, args, *at),
        Tree::Whole(..) | Tree::Decimal(..) => {
            return refuse(
                tree.at(),
                format!(
                    "expected a metric left of `{op}`, found {}: the metric goes first, as in \
                     `NetworkErrorRatio() > 0.5`",
                    tree.describe()
                ),
            )
        }
        Tree::Binary { .. } => {
            return refuse(
                op_at,
                format!(
                    "`{op}` compares {} with a constant; expected a metric on its left",
                    tree.describe()
                ),
            )
        }
    };
    let count = |wanted: usize, signature: &str| {
        if args.len() == wanted {
            Ok(())
        } else {
            refuse(
                at,
                format!(
                    "`{name}` takes {wanted} argument{} ({signature}), found {}",
                    if wanted == 1 { "" } else { "s" },
                    args.len()
                ),
            )
        }
    };
    match name {
        "NetworkErrorRatio" => {
            count(0, "none")?;
            Ok(BreakerMetric::NetworkErrorRatio)
        }
        "RequestThreshold" => {
            count(0, "none")?;
            Ok(BreakerMetric::RequestThreshold)
        }
        "LatencyAtQuantileMS" => {
            count(1, "the quantile, like `50.0`")?;
            match &args[0] {
                Tree::Decimal(q, _) => Ok(BreakerMetric::LatencyAtQuantileMs(*q)),
                other => refuse(
                    other.at(),
                    format!(
                        "`LatencyAtQuantileMS` takes a decimal quantile like `50.0` (with its \
                         `.0`), found {}",
                        other.describe()
                    ),
                ),
            }
        }
        "ResponseCodeRatio" => {
            count(4, "from, to, dividedFrom, dividedTo")?;
            let mut statuses = [0; 4];
            for (slot, arg) in statuses.iter_mut().zip(args) {
                match arg {
                    Tree::Whole(n, _) => *slot = *n,
                    other => {
                        return refuse(
                            other.at(),
                            format!(
                                "`ResponseCodeRatio` takes whole statuses like `500`, found {}",
                                other.describe()
                            ),
                        )
                    }
                }
            }
            let [from, to, divided_from, divided_to] = statuses;
            Ok(BreakerMetric::ResponseCodeRatio {
                from,
                to,
                divided_from,
                divided_to,
            })
        }
        _ => refuse(at, format!("unknown metric `{name}`; expected {METRICS}")),
    }
}

/// The right side of a comparison: a constant of the metric's type.
fn constant(tree: &Tree<'_>, metric: &BreakerMetric) -> Result<Threshold, ExpressionError> {
    match (tree, metric.is_ratio()) {
        (Tree::Parens(inner, _), _) => constant(inner, metric),
        (Tree::Decimal(n, _), true) => Ok(Threshold::Ratio(*n)),
        (Tree::Whole(n, _), false) => Ok(Threshold::Whole(*n)),
        (other, ratio) => {
            let wanted = if ratio {
                "a ratio, compared with a decimal number like `0.5`"
            } else {
                "whole, compared with a whole number like `100`"
            };
            refuse(
                other.at(),
                format!("the metric is {wanted}; found {}", other.describe()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BreakerCondition::*;
    use BreakerMetric::*;

    fn compare(metric: BreakerMetric, op: Comparison, value: Threshold) -> BreakerCondition {
        Compare { metric, op, value }
    }

    /// The expressions of oxy's `cbreaker/predicates_test.go` (Test_parseExpression_tripped)
    /// and `cbreaker_test.go` (`triggerNetRatio`, and TestCircuitBreaker_requestThreshold's
    /// `&& RequestThreshold() >= 20`), and the examples of Traefik's circuitbreaker.md.
    #[test]
    fn oxy_s_and_traefik_s_expressions_parse() {
        let half = Threshold::Ratio(0.5);
        assert_eq!(
            parse("NetworkErrorRatio() > 0.5"),
            Ok(compare(NetworkErrorRatio, Comparison::Greater, half))
        );
        assert_eq!(
            parse("NetworkErrorRatio() < 0.5"),
            Ok(compare(NetworkErrorRatio, Comparison::Less, half))
        );
        assert_eq!(
            parse("LatencyAtQuantileMS(50.0) > 50"),
            Ok(compare(
                LatencyAtQuantileMs(50.0),
                Comparison::Greater,
                Threshold::Whole(50)
            ))
        );
        let five_hundreds = ResponseCodeRatio {
            from: 500,
            to: 600,
            divided_from: 0,
            divided_to: 600,
        };
        assert_eq!(
            parse("ResponseCodeRatio(500, 600, 0, 600) > 0.5"),
            Ok(compare(five_hundreds.clone(), Comparison::Greater, half))
        );
        assert_eq!(
            parse("NetworkErrorRatio() > 0.5 && RequestThreshold() >= 20"),
            Ok(And(
                Box::new(compare(NetworkErrorRatio, Comparison::Greater, half)),
                Box::new(compare(
                    RequestThreshold,
                    Comparison::GreaterOrEqual,
                    Threshold::Whole(20)
                ))
            ))
        );
        assert_eq!(
            parse("ResponseCodeRatio(500, 600, 0, 600) > 0.30 || NetworkErrorRatio() > 0.10"),
            Ok(Or(
                Box::new(compare(
                    five_hundreds,
                    Comparison::Greater,
                    Threshold::Ratio(0.3)
                )),
                Box::new(compare(
                    NetworkErrorRatio,
                    Comparison::Greater,
                    Threshold::Ratio(0.1)
                ))
            ))
        );
    }

    #[test]
    fn and_binds_tighter_than_or_and_parentheses_group() {
        let a = compare(NetworkErrorRatio, Comparison::Equal, Threshold::Ratio(1.0));
        let b = compare(RequestThreshold, Comparison::NotEqual, Threshold::Whole(3));
        let c = compare(
            LatencyAtQuantileMs(99.9),
            Comparison::LessOrEqual,
            Threshold::Whole(7),
        );
        let (a, b, c) = (Box::new(a), Box::new(b), Box::new(c));
        let text = "NetworkErrorRatio() == 1.0 || RequestThreshold() != 3 && LatencyAtQuantileMS(99.9) <= 7";
        assert_eq!(
            parse(text),
            Ok(Or(a.clone(), Box::new(And(b.clone(), c.clone()))))
        );
        let text = "(NetworkErrorRatio() == 1.0 || RequestThreshold() != 3) && ((LatencyAtQuantileMS(99.9)) <= (7))";
        assert_eq!(parse(text), Ok(And(Box::new(Or(a, b)), c)));
        // Go's number spellings that predicate reads: `.5`, `1e-1`, leading zeros.
        assert_eq!(
            parse("NetworkErrorRatio() >= .5 || RequestThreshold() < 010 || NetworkErrorRatio() > 1e-1"),
            Ok(Or(
                Box::new(Or(
                    Box::new(compare(NetworkErrorRatio, Comparison::GreaterOrEqual, Threshold::Ratio(0.5))),
                    Box::new(compare(RequestThreshold, Comparison::Less, Threshold::Whole(10)))
                )),
                Box::new(compare(NetworkErrorRatio, Comparison::Greater, Threshold::Ratio(0.1)))
            ))
        );
    }

    /// What oxy refuses, each at the offset of its cause: types as its operators check them
    /// (`expected int, got float64`), arguments as `reflect.Call` checks them, operators
    /// predicate has no function for. A message of `None` is not checked.
    #[test]
    fn refusals_point_into_the_expression() {
        let ratio = "the metric is a ratio, compared with a decimal number like `0.5`; found";
        let whole = "the metric is whole, compared with a whole number like `100`; found";
        let quantile =
            "`LatencyAtQuantileMS` takes a decimal quantile like `50.0` (with its `.0`), found";
        let cases: &[(&str, usize, Option<String>)] = &[
            ("", 0, Some(format!("is empty; expected a comparison of {METRICS}"))),
            ("NetworkErrorRatio() > 1", 22, Some(format!("{ratio} the number `1`"))),
            ("LatencyAtQuantileMS(50.0) > 100.5", 28, Some(format!("{whole} the number `100.5`"))),
            ("LatencyAtQuantileMS(50) > 100", 20, Some(format!("{quantile} the number `50`"))),
            // Parenthesised arguments are refused by predicate (`*ast.ParenExpr is not supported`).
            ("LatencyAtQuantileMS((50.0)) > 1", 20, Some(format!("{quantile} the number `50.0`"))),
            (
                "ResponseCodeRatio(500, 600, 0) > 0.5",
                0,
                Some("`ResponseCodeRatio` takes 4 arguments (from, to, dividedFrom, dividedTo), found 3".into()),
            ),
            (
                "ResponseCodeRatio(500, 600.0, 0, 600) > 0.5",
                23,
                Some("`ResponseCodeRatio` takes whole statuses like `500`, found the number `600.0`".into()),
            ),
            (
                "NetworkErrorRatio(1) > 0.5",
                0,
                Some("`NetworkErrorRatio` takes 0 arguments (none), found 1".into()),
            ),
            (
                "NetworkErrorRate() > 0.5",
                0,
                Some(format!("unknown metric `NetworkErrorRate`; expected {METRICS}")),
            ),
            (
                "NetworkErrorRatio > 0.5",
                0,
                Some(format!("`NetworkErrorRatio` is not defined; expected {METRICS}, called with parentheses")),
            ),
            (
                "NetworkErrorRatio()",
                0,
                Some("expected a comparison like `NetworkErrorRatio() > 0.5`, found the metric `NetworkErrorRatio()` alone".into()),
            ),
            // The constant goes right, as oxy's operators take (metric, value).
            ("0.5 < NetworkErrorRatio()", 0, None),
            (
                "NetworkErrorRatio() > RequestThreshold()",
                22,
                Some(format!("{ratio} the metric `RequestThreshold()` alone")),
            ),
            ("RequestThreshold() > 1 > 2", 23, None),
            ("NetworkErrorRatio() > 0.5 &&", 28, None),
            ("(NetworkErrorRatio() > 0.5", 0, None),
            ("NetworkErrorRatio() > 0.5 & RequestThreshold() > 1", 26, None),
            ("!(NetworkErrorRatio() > 0.5)", 0, None),
            ("NetworkErrorRatio() > -0.5", 22, None),
            ("NetworkErrorRatio() = 0.5", 20, None),
            ("RequestThreshold() > 0x10", 21, Some("`0x10` is not a number like `100` or `0.5`".into())),
            ("RequestThreshold() > 1_000", 21, None),
            ("RequestThreshold() > \"5\"", 21, Some("unexpected `\"`".into())),
            ("NetworkErrorRatio() > 0.5 )", 26, None),
            ("ResponseCodeRatio(500 600) > 0.5", 22, None),
        ];
        for (text, offset, message) in cases {
            let e = parse(text).expect_err(text);
            assert_eq!(e.offset, *offset, "{text}: {}", e.message);
            if let Some(message) = message {
                assert_eq!(&e.message, message, "{text}");
            }
        }
    }

    #[test]
    fn conditions_compare_as_go_does() {
        let parsed = |text| parse(text).expect(text);
        let ratio = |value| move |_: &BreakerMetric| Threshold::Ratio(value);
        assert!(parsed("NetworkErrorRatio() > 0.5").holds(&mut ratio(0.6)));
        assert!(!parsed("NetworkErrorRatio() > 0.5").holds(&mut ratio(0.5)));
        assert!(parsed("NetworkErrorRatio() >= 0.5").holds(&mut ratio(0.5)));
        assert!(parsed("NetworkErrorRatio() == 0.5").holds(&mut ratio(0.5)));
        assert!(parsed("NetworkErrorRatio() != 0.4").holds(&mut ratio(0.5)));
        assert!(parsed("NetworkErrorRatio() <= 0.5").holds(&mut ratio(0.5)));
        let mut reads = Vec::new();
        let condition = parsed("RequestThreshold() > 3 && LatencyAtQuantileMS(50.0) > 1");
        let mut read = |m: &BreakerMetric| {
            reads.push(m.clone());
            Threshold::Whole(2)
        };
        assert!(!condition.holds(&mut read));
        assert_eq!(
            reads,
            [RequestThreshold],
            "&& stops at its first false operand"
        );
        assert!(condition.reads_latency());
        assert!(!parsed("RequestThreshold() > 3").reads_latency());
    }
}
