//! The `circuit_breaker` middleware's `expression`: Traefik's language (vulcand/oxy's cbreaker
//! predicates, read by vulcand/predicate as a Go expression). A metric compared with a
//! constant (`NetworkErrorRatio() > 0.5`), comparisons joined by `&&` and `||`, parentheses.
//! As there, the constant goes right of the metric and has the metric's type: a ratio takes a
//! decimal number (`0.5`), a latency or a count a whole one (`100`); `LatencyAtQuantileMS`
//! takes a decimal quantile (`50.0`) and `ResponseCodeRatio` four whole statuses. The grammar
//! is read by `crate::predicate`; this module checks the metrics and their types, and its errors
//! carry the byte offset in the expression.

use crate::predicate::{refuse, Language, Operator, Tree};
pub use crate::predicate::{Comparison, ExpressionError};

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

const METRICS: &str = "NetworkErrorRatio(), ResponseCodeRatio(from, to, dividedFrom, \
                       dividedTo), LatencyAtQuantileMS(quantile) or RequestThreshold()";

const LANGUAGE: Language = Language {
    noun: "metric",
    example: "NetworkErrorRatio() > 0.5",
    functions: METRICS,
    constants: "a number",
    strings: false,
};

/// Parses `text` into the condition the breaker checks.
pub fn parse(text: &str) -> Result<BreakerCondition, ExpressionError> {
    if text.trim().is_empty() {
        return refuse(0, format!("is empty; expected a comparison of {METRICS}"));
    }
    condition(&crate::predicate::parse(text, &LANGUAGE)?)
}

/// The parsed tree as a condition, its types checked as oxy's operators check them.
fn condition(tree: &Tree<'_>) -> Result<BreakerCondition, ExpressionError> {
    match tree.bare() {
        Tree::Binary {
            op,
            left,
            right,
            at,
        } => match *op {
            Operator::And => Ok(BreakerCondition::And(
                Box::new(condition(left)?),
                Box::new(condition(right)?),
            )),
            Operator::Or => Ok(BreakerCondition::Or(
                Box::new(condition(left)?),
                Box::new(condition(right)?),
            )),
            Operator::Compare(comparison) => {
                let metric = metric(left, *op, *at)?;
                let value = constant(right, &metric)?;
                Ok(BreakerCondition::Compare {
                    metric,
                    op: comparison,
                    value,
                })
            }
        },
        other => LANGUAGE.not_a_comparison(other),
    }
}

/// The left side of a comparison: a metric, with its arguments' types checked.
fn metric(tree: &Tree<'_>, op: Operator, op_at: usize) -> Result<BreakerMetric, ExpressionError> {
    let describe = |tree: &Tree<'_>| tree.describe(LANGUAGE.noun);
    let (name, args, at) = LANGUAGE.callee(tree, op, op_at)?;
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
                        describe(other)
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
                                describe(other)
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
    match (tree.bare(), metric.is_ratio()) {
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
                format!(
                    "the metric is {wanted}; found {}",
                    other.describe(LANGUAGE.noun)
                ),
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
