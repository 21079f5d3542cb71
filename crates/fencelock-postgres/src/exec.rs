//! How fencelock's statements travel: as cached named prepared statements (a direct connection),
//! or as one simple-protocol message with the parameters written into the text (through a
//! transaction-mode pooler).
//!
//! Behind PgBouncer in transaction mode (before 1.21) a client keeps a server connection only
//! until the end of each transaction, and outside a transaction until the next `Sync`. sqlx's
//! extended protocol sends `Parse`/`Describe`/`Sync`, waits, then `Bind`/`Execute`/`Sync`: a
//! named statement lands on one server connection and is executed (or prepared again, "already
//! exists") on another, and even an unnamed one (`persistent(false)`) can be parsed on one
//! server connection and bound on the next, where another client's unnamed statement may sit.
//! A simple `Query` message is one round trip that ends with one `ReadyForQuery`: it runs whole
//! on one server connection, in or out of a transaction. Its parameters are written as
//! literals that carry nothing but hex digits, decimal digits and keywords, so no value can
//! change the statement, whatever `standard_conforming_strings` says.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;

use sqlx::postgres::{PgArguments, PgQueryResult, PgRow};
use sqlx::{Acquire, Arguments, Executor, FromRow, PgConnection, Postgres};

/// Which protocol fencelock's statements use on a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Named prepared statements, cached per connection: one round trip per call once
    /// prepared. Direct connections and session-mode poolers.
    Prepared,
    /// One simple `Query` message per call, parameters as literals: correct through a
    /// transaction-mode pooler, at the cost of parsing and planning each call.
    Simple,
}

/// One parameter of a statement, with the SQL type it is bound as.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    /// A `text[]`.
    TextArray(&'a [&'a str]),
    /// A `float8[]`.
    Float8Array(&'a [f64]),
    Int8(i64),
    OptInt8(Option<i64>),
    Float8(f64),
    Bool(bool),
    Bytea(&'a [u8]),
    OptBytea(Option<&'a [u8]>),
}

impl Arg<'_> {
    fn add_to(self, args: &mut PgArguments) -> Result<(), sqlx::Error> {
        match self {
            Arg::Text(v) => args.add(v),
            Arg::TextArray(v) => args.add(v),
            Arg::Float8Array(v) => args.add(v),
            Arg::Int8(v) => args.add(v),
            Arg::OptInt8(v) => args.add(v),
            Arg::Float8(v) => args.add(v),
            Arg::Bool(v) => args.add(v),
            Arg::Bytea(v) => args.add(v),
            Arg::OptBytea(v) => args.add(v),
        }
        .map_err(sqlx::Error::Encode)
    }

    /// The parameter as a parenthesised SQL expression of its type. Functions are named with
    /// `pg_catalog.`: the statement runs on the caller's `search_path`, where an exact match
    /// for `convert_from(bytea, unknown)` would otherwise win (DESIGN 8.1).
    fn write_literal(self, out: &mut String) {
        // `write!` to a String cannot fail.
        let _ = match self {
            Arg::Text(v) => write!(
                out,
                "(pg_catalog.convert_from(pg_catalog.decode('{}', 'hex'), 'UTF8'))",
                hex(v.as_bytes())
            ),
            Arg::TextArray(v) => {
                out.push_str("(CAST(ARRAY[");
                for (i, item) in v.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    Arg::Text(item).write_literal(out);
                }
                write!(out, "] AS text[]))")
            }
            Arg::Float8Array(v) => {
                out.push_str("(CAST(ARRAY[");
                for (i, item) in v.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    Arg::Float8(*item).write_literal(out);
                }
                write!(out, "] AS float8[]))")
            }
            Arg::Int8(v) | Arg::OptInt8(Some(v)) => write!(out, "(CAST('{v}' AS int8))"),
            Arg::OptInt8(None) => write!(out, "(CAST(NULL AS int8))"),
            Arg::Float8(v) if v.is_finite() => write!(out, "(CAST('{v}' AS float8))"),
            Arg::Float8(v) if v.is_nan() => write!(out, "(CAST('NaN' AS float8))"),
            Arg::Float8(v) if v > 0.0 => write!(out, "(CAST('Infinity' AS float8))"),
            Arg::Float8(_) => write!(out, "(CAST('-Infinity' AS float8))"),
            Arg::Bool(v) => write!(out, "({v})"),
            Arg::Bytea(v) | Arg::OptBytea(Some(v)) => {
                write!(out, "(pg_catalog.decode('{}', 'hex'))", hex(v))
            }
            Arg::OptBytea(None) => write!(out, "(CAST(NULL AS bytea))"),
        };
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// A piece of a statement's text.
#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    /// `$n`, zero-based.
    Param(usize),
}

/// One statement: its text for `Parse`, and the same text cut at its `$n` placeholders for the
/// simple protocol. Full-line `--` comments are dropped from both (a comment naming `$6`
/// would otherwise carry a copy of the value).
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    text: String,
    pieces: Vec<Piece>,
    params: usize,
}

impl Sql {
    /// `text` without its comment lines. fencelock's statements hold no `$` outside their
    /// placeholders (no dollar quoting, no `$` in a literal); the unit tests check that.
    pub(crate) fn new(text: &str) -> Self {
        let text: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut pieces = Vec::new();
        let mut params = 0;
        let mut literal = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find('$') {
            let digits = rest[at + 1..]
                .bytes()
                .take_while(u8::is_ascii_digit)
                .count();
            let number: Option<usize> = rest[at + 1..at + 1 + digits].parse().ok();
            match number.filter(|n| *n > 0) {
                Some(n) => {
                    literal.push_str(&rest[..at]);
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    pieces.push(Piece::Param(n - 1));
                    params = params.max(n);
                    rest = &rest[at + 1 + digits..];
                }
                None => {
                    literal.push_str(&rest[..=at]);
                    rest = &rest[at + 1..];
                }
            }
        }
        literal.push_str(rest);
        pieces.push(Piece::Text(literal));
        Sql {
            text,
            pieces,
            params,
        }
    }

    /// The text sent to `Parse`.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The statement with `args` written in, for the simple protocol.
    pub(crate) fn render(&self, args: &[Arg<'_>]) -> Result<String, sqlx::Error> {
        if args.len() != self.params {
            return Err(sqlx::Error::Protocol(format!(
                "statement takes {} parameters, {} given",
                self.params,
                args.len()
            )));
        }
        let mut out = String::with_capacity(self.text.len() + 64);
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                // In range: `params` is the largest placeholder and `args` has that many.
                Piece::Param(i) => args[*i].write_literal(&mut out),
            }
        }
        Ok(out)
    }

    fn arguments(&self, args: &[Arg<'_>]) -> Result<PgArguments, sqlx::Error> {
        let mut arguments = PgArguments::default();
        for arg in args {
            arg.add_to(&mut arguments)?;
        }
        Ok(arguments)
    }

    /// The first row, if any.
    pub(crate) fn fetch_optional<'a, 'e, T, A>(
        &'a self,
        protocol: Protocol,
        executor: A,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, Option<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin + 'a,
        A: Acquire<'e, Database = Postgres> + Send + 'a,
        'e: 'a,
    {
        Box::pin(async move {
            match protocol {
                Protocol::Prepared => {
                    let arguments = self.arguments(args)?;
                    let mut conn = executor.acquire().await?;
                    let conn: &mut PgConnection = &mut conn;
                    sqlx::query_as_with(&self.text, arguments)
                        .fetch_optional(conn)
                        .await
                }
                Protocol::Simple => {
                    let text = self.render(args)?;
                    let mut conn = executor.acquire().await?;
                    let conn: &mut PgConnection = &mut conn;
                    // `RawSql::fetch_optional` fails on no row in sqlx 0.8: ask the executor.
                    let row = conn.fetch_optional(sqlx::raw_sql(&text)).await?;
                    row.map(|row| T::from_row(&row)).transpose()
                }
            }
        })
    }

    /// Every row.
    pub(crate) fn fetch_all<'a, 'e, T, A>(
        &'a self,
        protocol: Protocol,
        executor: A,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin + 'a,
        A: Acquire<'e, Database = Postgres> + Send + 'a,
        'e: 'a,
    {
        Box::pin(async move {
            match protocol {
                Protocol::Prepared => {
                    let arguments = self.arguments(args)?;
                    let mut conn = executor.acquire().await?;
                    let conn: &mut PgConnection = &mut conn;
                    sqlx::query_as_with(&self.text, arguments)
                        .fetch_all(conn)
                        .await
                }
                Protocol::Simple => {
                    let text = self.render(args)?;
                    let mut conn = executor.acquire().await?;
                    let conn: &mut PgConnection = &mut conn;
                    let rows = conn.fetch_all(sqlx::raw_sql(&text)).await?;
                    rows.iter().map(T::from_row).collect()
                }
            }
        })
    }

    /// The first row; none is [`sqlx::Error::RowNotFound`].
    pub(crate) fn fetch_one<'a, 'e, T, A>(
        &'a self,
        protocol: Protocol,
        executor: A,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, T>
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin + 'a,
        A: Acquire<'e, Database = Postgres> + Send + 'a,
        'e: 'a,
    {
        let row = self.fetch_optional(protocol, executor, args);
        Box::pin(async move { row.await?.ok_or(sqlx::Error::RowNotFound) })
    }

    /// The first column of the first row, if any.
    pub(crate) fn scalar_optional<'a, 'e, T, A>(
        &'a self,
        protocol: Protocol,
        executor: A,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, Option<T>>
    where
        (T,): for<'r> FromRow<'r, PgRow>,
        T: Send + Unpin + 'a,
        A: Acquire<'e, Database = Postgres> + Send + 'a,
        'e: 'a,
    {
        let row = self.fetch_optional::<(T,), A>(protocol, executor, args);
        Box::pin(async move { Ok(row.await?.map(|(value,)| value)) })
    }

    /// The first column of the first row; none is [`sqlx::Error::RowNotFound`].
    pub(crate) fn scalar_one<'a, 'e, T, A>(
        &'a self,
        protocol: Protocol,
        executor: A,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, T>
    where
        (T,): for<'r> FromRow<'r, PgRow>,
        T: Send + Unpin + 'a,
        A: Acquire<'e, Database = Postgres> + Send + 'a,
        'e: 'a,
    {
        let value = self.scalar_optional::<T, A>(protocol, executor, args);
        Box::pin(async move { value.await?.ok_or(sqlx::Error::RowNotFound) })
    }

    /// Runs the statement, discarding rows.
    pub(crate) fn execute<'a, 'e, A>(
        &'a self,
        protocol: Protocol,
        executor: A,
        args: &'a [Arg<'a>],
    ) -> BoxFuture<'a, PgQueryResult>
    where
        A: Acquire<'e, Database = Postgres> + Send + 'a,
        'e: 'a,
    {
        Box::pin(async move {
            match protocol {
                Protocol::Prepared => {
                    let arguments = self.arguments(args)?;
                    let mut conn = executor.acquire().await?;
                    let conn: &mut PgConnection = &mut conn;
                    sqlx::query_with(&self.text, arguments).execute(conn).await
                }
                Protocol::Simple => {
                    let text = self.render(args)?;
                    let mut conn = executor.acquire().await?;
                    let conn: &mut PgConnection = &mut conn;
                    // The executor's own method: `RawSql::execute` is an async fn whose future the
                    // compiler cannot prove `Send` here.
                    conn.execute(sqlx::raw_sql(&text)).await
                }
            }
        })
    }
}

/// A boxed database call: built where every lifetime is named, so the compiler can prove it
/// `Send` (async fns generic over an executor's lifetime often cannot be, inside
/// `async_trait` methods).
pub(crate) type BoxFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn renders_parameters_as_inert_literals() {
        let sql = Sql::new("-- $1 key, $2 value\nSELECT f($1, $2, $10, $1) -- $3 inline\n");
        assert_eq!(sql.params, 10);
        assert!(!sql.text().contains("key, $2 value"));
        let sql = Sql::new("-- $1 key\nSELECT f($1, $2, $3, $4, $5, $6), '$', $0");
        assert_eq!(sql.params, 6);
        let rendered = sql
            .render(&[
                Arg::Text("it's $1 \\x00 ü"),
                Arg::Int8(-9_223_372_036_854_775_808),
                Arg::Float8(300_000.0),
                Arg::Bool(true),
                Arg::Bytea(&[0, 0xff]),
                Arg::OptBytea(None),
            ])
            .unwrap();
        assert_eq!(
            rendered,
            "SELECT f((pg_catalog.convert_from(pg_catalog.decode('69742773202431205c78303020c3bc', 'hex'), 'UTF8')), \
             (CAST('-9223372036854775808' AS int8)), (CAST('300000' AS float8)), (true), \
             (pg_catalog.decode('00ff', 'hex')), (CAST(NULL AS bytea))), '$', $0"
        );
        assert!(sql.render(&[Arg::Bool(false)]).is_err());
    }

    #[test]
    fn text_arrays_render_as_arrays_of_inert_literals() {
        let mut out = String::new();
        Arg::TextArray(&["a", "it's"]).write_literal(&mut out);
        assert_eq!(
            out,
            "(CAST(ARRAY[(pg_catalog.convert_from(pg_catalog.decode('61', 'hex'), 'UTF8')), \
             (pg_catalog.convert_from(pg_catalog.decode('69742773', 'hex'), 'UTF8'))] AS text[]))"
        );
        let mut out = String::new();
        Arg::TextArray(&[]).write_literal(&mut out);
        assert_eq!(out, "(CAST(ARRAY[] AS text[]))");
    }

    #[test]
    fn floats_render_as_postgres_reads_them() {
        let mut out = String::new();
        for v in [1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e21] {
            Arg::Float8(v).write_literal(&mut out);
        }
        assert_eq!(
            out,
            "(CAST('1.5' AS float8))(CAST('NaN' AS float8))(CAST('Infinity' AS float8))\
             (CAST('-Infinity' AS float8))(CAST('1000000000000000000000' AS float8))"
        );
    }
}
