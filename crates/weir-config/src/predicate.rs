//! vulcand/predicate's grammar, which Traefik's oxy middlewares read their expressions in: Go
//! expressions made of function calls, numbers (and strings where the language has them),
//! comparisons, `&&`, `||` and parentheses. This module reads the text into a [`Tree`] with
//! byte offsets; each language (`circuit_breaker`'s `expression`, `buffering`'s
//! `retry_expression`) checks the tree against its own functions and types.

use std::cmp::Ordering;
use std::fmt;

/// What a language adds to the grammar, and how its errors name its parts.
#[derive(Debug, Clone, Copy)]
pub struct Language {
    /// What its functions are called in errors: `metric`.
    pub noun: &'static str,
    /// A comparison in it, for errors: `NetworkErrorRatio() > 0.5`.
    pub example: &'static str,
    /// Its functions, for errors: `A(), B() or C()`.
    pub functions: &'static str,
    /// What its functions are compared with, for errors: `a number`.
    pub constants: &'static str,
    /// Whether it reads Go's string literals (`"GET"`, `` `GET` ``); without them a quote is
    /// an unexpected character.
    pub strings: bool,
}

impl Language {
    /// The left side of a comparison, which must be a call: its name, arguments and offset.
    pub fn callee<'a, 't>(
        &self,
        left: &'a Tree<'t>,
        op: Operator,
        op_at: usize,
    ) -> Result<(&'t str, &'a [Tree<'t>], usize), ExpressionError> {
        let Language { noun, example, .. } = self;
        match left.bare() {
            Tree::Call { name, args, at } => Ok((name, args, *at)),
            Tree::Binary { .. } => refuse(
                op_at,
                format!(
                    "`{op}` compares {} with a constant; expected a {noun} on its left",
                    left.describe(noun)
                ),
            ),
            other => refuse(
                other.at(),
                format!(
                    "expected a {noun} left of `{op}`, found {}: the {noun} goes first, as in \
                     `{example}`",
                    other.describe(noun)
                ),
            ),
        }
    }

    /// The refusal of `tree` where a comparison was expected.
    pub fn not_a_comparison<T>(&self, tree: &Tree<'_>) -> Result<T, ExpressionError> {
        refuse(
            tree.at(),
            format!(
                "expected a comparison like `{}`, found {}",
                self.example,
                tree.describe(self.noun)
            ),
        )
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

/// An [`ExpressionError`] at `offset`.
pub fn refuse<T>(offset: usize, message: impl Into<String>) -> Result<T, ExpressionError> {
    Err(ExpressionError {
        offset,
        message: message.into(),
    })
}

/// A comparison of a function's value with a constant.
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
    /// Whether a value ordered `ordering` against the constant satisfies the comparison.
    pub fn admits(self, ordering: Ordering) -> bool {
        match self {
            Comparison::Greater => ordering == Ordering::Greater,
            Comparison::GreaterOrEqual => ordering != Ordering::Less,
            Comparison::Less => ordering == Ordering::Less,
            Comparison::LessOrEqual => ordering != Ordering::Greater,
            Comparison::Equal => ordering == Ordering::Equal,
            Comparison::NotEqual => ordering != Ordering::Equal,
        }
    }
}

/// A binary operator, with Go's precedence: `||` below `&&` below the comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    And,
    Or,
    Compare(Comparison),
}

impl Operator {
    /// The spellings, longest first so `>=` is not read as `>`.
    const ALL: [(&'static str, Operator); 8] = [
        ("&&", Operator::And),
        ("||", Operator::Or),
        (">=", Operator::Compare(Comparison::GreaterOrEqual)),
        ("<=", Operator::Compare(Comparison::LessOrEqual)),
        ("==", Operator::Compare(Comparison::Equal)),
        ("!=", Operator::Compare(Comparison::NotEqual)),
        (">", Operator::Compare(Comparison::Greater)),
        ("<", Operator::Compare(Comparison::Less)),
    ];

    fn precedence(self) -> u8 {
        match self {
            Operator::Or => 1,
            Operator::And => 2,
            Operator::Compare(_) => 3,
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (spelling, _) = Operator::ALL
            .iter()
            .find(|(_, op)| op == self)
            .unwrap_or(&("?", Operator::And));
        f.write_str(spelling)
    }
}

/// The expression as written, before a language checks its functions and types.
#[derive(Debug)]
pub enum Tree<'t> {
    Call {
        name: &'t str,
        args: Vec<Tree<'t>>,
        at: usize,
    },
    Whole(i64, usize),
    Decimal(f64, usize),
    /// A string literal's content, in a language with strings.
    Text(&'t str, usize),
    Binary {
        op: Operator,
        left: Box<Tree<'t>>,
        right: Box<Tree<'t>>,
        /// The operator's offset.
        at: usize,
    },
    Parens(Box<Tree<'t>>, usize),
}

impl Tree<'_> {
    /// Where the tree starts.
    pub fn at(&self) -> usize {
        match self {
            Tree::Call { at, .. }
            | Tree::Whole(_, at)
            | Tree::Decimal(_, at)
            | Tree::Text(_, at)
            | Tree::Parens(_, at) => *at,
            Tree::Binary { left, .. } => left.at(),
        }
    }

    /// The tree inside its parentheses, if any.
    pub fn bare(&self) -> &Self {
        match self {
            Tree::Parens(inner, _) => inner.bare(),
            other => other,
        }
    }

    /// What the tree is, for an error; a call is a `noun` (`metric`).
    pub fn describe(&self, noun: &str) -> String {
        match self {
            Tree::Call { name, .. } => format!("the {noun} `{name}()` alone"),
            Tree::Whole(n, _) => format!("the number `{n}`"),
            Tree::Decimal(n, _) => format!("the number `{n:?}`"),
            Tree::Text(text, _) => format!("the string {text:?}"),
            Tree::Binary { op, .. } => format!("a `{op}` expression"),
            Tree::Parens(inner, _) => inner.describe(noun),
        }
    }
}

/// Reads `text` into its tree; `language` says whether strings are read and names its parts
/// in errors.
pub fn parse<'t>(text: &'t str, language: &Language) -> Result<Tree<'t>, ExpressionError> {
    let tokens = tokenize(text, language)?;
    // The tree is built, read and dropped recursively: its depth is bounded, so that no
    // expression overflows the stack (a rule's parser bounds its own the same way).
    let operators = tokens
        .iter()
        .filter(|t| matches!(t.kind, TokenKind::Operator(_)))
        .count();
    if operators > MAX_OPERATORS {
        return refuse(0, format!("more than {MAX_OPERATORS} operators"));
    }
    let mut parser = Parser {
        tokens: &tokens,
        next: 0,
        end: text.len(),
        language,
        depth: 0,
    };
    let tree = parser.expression(1)?;
    if let Some(token) = parser.peek() {
        return refuse(token.at, format!("unexpected {}", token.kind));
    }
    Ok(tree)
}

#[derive(Debug, Clone, PartialEq)]
enum TokenKind<'t> {
    Name(&'t str),
    Whole(i64),
    Decimal(f64),
    Text(&'t str),
    Open,
    Close,
    Comma,
    Operator(Operator),
    /// A Go operator the grammar does not have (`+`, `!`, `&`, `=`...).
    Unsupported(&'t str),
}

impl fmt::Display for TokenKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenKind::Name(name) => write!(f, "`{name}`"),
            TokenKind::Whole(n) => write!(f, "`{n}`"),
            TokenKind::Decimal(n) => write!(f, "`{n:?}`"),
            TokenKind::Text(text) => write!(f, "{text:?}"),
            TokenKind::Open => f.write_str("`(`"),
            TokenKind::Close => f.write_str("`)`"),
            TokenKind::Comma => f.write_str("`,`"),
            TokenKind::Operator(op) => write!(f, "`{op}`"),
            TokenKind::Unsupported(op) => write!(f, "`{op}`"),
        }
    }
}

#[derive(Debug)]
struct Token<'t> {
    kind: TokenKind<'t>,
    at: usize,
}

fn tokenize<'t>(text: &'t str, language: &Language) -> Result<Vec<Token<'t>>, ExpressionError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &text[at..];
        let b = bytes[at];
        let (kind, len) = if b.is_ascii_whitespace() {
            // Go's scanner skips ASCII spaces only.
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
        } else if language.strings && (b == b'"' || b == b'`') {
            string(rest, at)?
        } else if let Some((spelling, op)) = Operator::ALL.iter().find(|(s, _)| rest.starts_with(s))
        {
            (TokenKind::Operator(*op), spelling.len())
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

/// A Go string literal, `"..."` or `` `...` ``; escapes are refused (no function needs them).
fn string(rest: &str, at: usize) -> Result<(TokenKind<'_>, usize), ExpressionError> {
    let quote = &rest[..1];
    let Some(end) = rest[1..].find(quote) else {
        return refuse(at, format!("a string starting with {quote} is not closed"));
    };
    let inner = &rest[1..1 + end];
    if let Some(escape) = inner.find('\\').filter(|_| quote == "\"") {
        return refuse(at + 1 + escape, "escapes in strings are not supported");
    }
    Ok((TokenKind::Text(inner), end + 2))
}

/// The most operators (`&&`, `||`, comparisons) an expression may have, and the deepest its
/// parentheses may nest.
const MAX_OPERATORS: usize = 300;
const MAX_NESTING: usize = 100;

struct Parser<'p, 't> {
    tokens: &'p [Token<'t>],
    next: usize,
    end: usize,
    language: &'p Language,
    /// How many `(` enclose the token read next.
    depth: usize,
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
                TokenKind::Unsupported(op) => {
                    return refuse(token.at, unsupported(self.language.noun, op))
                }
                _ => break,
            };
            if op.precedence() < min {
                break;
            }
            let at = token.at;
            self.next += 1;
            let right = self.expression(op.precedence() + 1)?;
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
        let Language {
            noun,
            functions,
            constants,
            ..
        } = *self.language;
        let end = self.end;
        let Some(token) = self.take() else {
            return refuse(
                end,
                format!("ends too soon; expected {functions}, or {constants}"),
            );
        };
        let at = token.at;
        match &token.kind {
            TokenKind::Whole(n) => Ok(Tree::Whole(*n, at)),
            TokenKind::Decimal(n) => Ok(Tree::Decimal(*n, at)),
            TokenKind::Text(text) => Ok(Tree::Text(text, at)),
            TokenKind::Open => {
                if self.depth == MAX_NESTING {
                    return refuse(at, format!("nested more than {MAX_NESTING} deep in `(`"));
                }
                self.depth += 1;
                let inner = self.expression(1);
                self.depth -= 1;
                let inner = inner?;
                self.expect_close(at)?;
                Ok(Tree::Parens(Box::new(inner), at))
            }
            TokenKind::Name(name) => {
                let name = *name;
                if self.peek().map(|t| &t.kind) != Some(&TokenKind::Open) {
                    return refuse(
                        at,
                        format!(
                            "`{name}` is not defined; expected {functions}, called with \
                             parentheses"
                        ),
                    );
                }
                self.next += 1;
                let args = self.arguments(name)?;
                Ok(Tree::Call { name, args, at })
            }
            TokenKind::Unsupported(op) => refuse(at, unsupported(noun, op)),
            other => refuse(
                at,
                format!("expected {functions}, {constants} or `(`, found {other}"),
            ),
        }
    }

    /// A call's arguments, after its `(`.
    fn arguments(&mut self, name: &str) -> Result<Vec<Tree<'t>>, ExpressionError> {
        let mut args = Vec::new();
        if self.peek().map(|t| &t.kind) == Some(&TokenKind::Close) {
            self.next += 1;
            return Ok(args);
        }
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
                }) => return Ok(args),
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

/// The refusal of a Go operator the grammar does not have; a call is a `noun`.
fn unsupported(noun: &str, op: &str) -> String {
    format!(
        "`{op}` is not supported: a {noun} is compared with a constant by `>`, `>=`, `<`, `<=`, \
         `==` or `!=`, and comparisons are joined by `&&` and `||`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BARE: Language = Language {
        noun: "function",
        example: "F() > 1",
        functions: "F()",
        constants: "a number",
        strings: false,
    };

    /// A deep or long expression is refused before it is built (found with a 100,000-deep
    /// `(`, which overflowed the stack), and one within the bounds parses.
    #[test]
    fn deep_or_long_expressions_are_refused() {
        let deep = format!("{}F(){}", "(".repeat(100_000), ")".repeat(100_000));
        let refused = parse(&deep, &BARE).unwrap_err();
        assert_eq!(
            (refused.offset, refused.message.as_str()),
            (100, "nested more than 100 deep in `(`")
        );
        let within = format!("{}F(){} > 1", "(".repeat(100), ")".repeat(100));
        assert!(parse(&within, &BARE).is_ok());
        let long = vec!["F() > 1"; 200].join(" && ");
        assert_eq!(
            parse(&long, &BARE).unwrap_err().message,
            "more than 300 operators"
        );
        let short = vec!["F() > 1"; 150].join(" && ");
        assert!(parse(&short, &BARE).is_ok());
    }

    /// Go's precedence and left associativity, each node at its offset.
    #[test]
    fn trees_keep_precedence_and_offsets() {
        let tree = parse("F() > 1 || G(2, 3.5) == 4 && (H())", &BARE).unwrap();
        let Tree::Binary {
            op: Operator::Or,
            left,
            right,
            at: 8,
        } = &tree
        else {
            panic!("{tree:?}");
        };
        assert!(matches!(
            **left,
            Tree::Binary {
                op: Operator::Compare(Comparison::Greater),
                at: 4,
                ..
            }
        ));
        let Tree::Binary {
            op: Operator::And,
            left,
            right,
            at: 26,
        } = &**right
        else {
            panic!("{right:?}");
        };
        let Tree::Binary { left: call, .. } = &**left else {
            panic!("{left:?}");
        };
        assert!(matches!(&**call, Tree::Call { name: "G", args, at: 11 } if args.len() == 2));
        assert!(matches!(
            right.bare(),
            Tree::Call {
                name: "H",
                at: 30,
                ..
            }
        ));
        assert_eq!(right.at(), 29);
        let chained = parse("F() < 1 < 2", &BARE).unwrap();
        assert!(matches!(chained, Tree::Binary { at: 8, .. }));
    }

    /// Strings are read only by a language that has them; where they are read, Go's two
    /// spellings.
    #[test]
    fn strings_only_where_the_language_has_them() {
        let e = parse("F() == \"GET\"", &BARE).unwrap_err();
        assert_eq!((e.offset, e.message.as_str()), (7, "unexpected `\"`"));
        let with_strings = Language {
            strings: true,
            ..BARE
        };
        for text in ["F() == \"GET\"", "F() == `GET`"] {
            let tree = parse(text, &with_strings).unwrap();
            let Tree::Binary { right, .. } = tree else {
                panic!("{text}");
            };
            assert!(matches!(*right, Tree::Text("GET", 7)), "{text}");
        }
        let e = parse("F() == `G\\ET`", &with_strings).unwrap();
        assert!(
            matches!(e, Tree::Binary { right, .. } if matches!(*right, Tree::Text("G\\ET", 7)))
        );
    }

    #[test]
    fn operators_print_as_written() {
        for (spelling, op) in Operator::ALL {
            assert_eq!(op.to_string(), spelling);
        }
    }
}
