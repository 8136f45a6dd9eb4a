//! The `lua` middleware's `body_filter` (lua-nginx-module's `body_filter_by_lua`): its script
//! runs on each piece of the answer's body as the driver sends it, sees the piece as
//! `ngx.arg[1]` and the body's end as `ngx.arg[2]`, and may replace the piece, drop it (`nil`
//! or `""`) or end the body there (`ngx.arg[2] = true`).

use super::request::RequestState;
use super::vm::WorkerVm;
use crate::reply::body_filter::PieceFilter;
use mlua::Value;
use std::cell::RefCell;
use std::io;
use std::rc::Rc;

/// The piece a `body_filter` call is given: `ngx.arg`, made as a table when the script first
/// reads it (a script that never does passes the piece on as it is).
#[derive(Default)]
pub(super) struct BodyPiece {
    pub data: Vec<u8>,
    pub eof: bool,
    pub arg: Option<mlua::Table>,
}

/// One answer's `body_filter`.
pub(super) struct LuaBodyFilter {
    pub vm: Rc<WorkerVm>,
    pub index: usize,
    pub name: String,
    pub state: Rc<RefCell<RequestState>>,
    /// What the last piece became.
    pub out: Vec<u8>,
    /// The body has ended (its last piece was filtered, or the script ended it).
    pub ended: bool,
}

impl PieceFilter for LuaBodyFilter {
    fn piece(&mut self, data: &[u8], eof: bool) -> io::Result<&[u8]> {
        self.out.clear();
        if self.ended {
            return Ok(&self.out);
        }
        {
            let mut state = self.state.borrow_mut();
            let piece = state.piece.get_or_insert_with(Box::default);
            piece.data.clear();
            piece.data.extend_from_slice(data);
            piece.eof = eof;
            piece.arg = None;
        }
        if let Err(e) = self
            .vm
            .run_now(self.index, &self.state, "body_filter_by_lua*")
        {
            // As nginx, which aborts the answer: the client sees it cut short.
            super::log_failure(&self.name, &e.to_string());
            self.ended = true;
            return Err(io::Error::other("the body filter failed"));
        }
        let arg = self
            .state
            .borrow_mut()
            .piece
            .as_mut()
            .and_then(|p| p.arg.take());
        let Some(arg) = arg else {
            self.out.extend_from_slice(data);
            self.ended = eof;
            return Ok(&self.out);
        };
        let (piece, end) = match read_arg(&arg) {
            Ok(read) => read,
            Err(e) => {
                super::log_failure(&self.name, &e.to_string());
                self.ended = true;
                return Err(io::Error::other("the body filter failed"));
            }
        };
        self.out.extend_from_slice(&piece);
        self.ended = eof || end;
        Ok(&self.out)
    }
}

/// `ngx.arg[1]` and `ngx.arg[2]` as the script left them: the piece (a string, a number, a
/// list of strings, or nothing for `nil`) and whether it ended the body.
fn read_arg(arg: &mlua::Table) -> mlua::Result<(Vec<u8>, bool)> {
    let mut piece = Vec::new();
    match arg.raw_get::<Value>(1)? {
        Value::Nil => {}
        Value::Table(list) => {
            for item in list.sequence_values::<mlua::String>() {
                piece.extend_from_slice(&item?.as_bytes());
            }
        }
        Value::String(s) => piece.extend_from_slice(&s.as_bytes()),
        Value::Integer(n) => {
            piece.extend_from_slice(super::ngx_util::format_number(n as f64).as_bytes())
        }
        Value::Number(n) => piece.extend_from_slice(super::ngx_util::format_number(n).as_bytes()),
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad argument #1 to 'ngx.arg' (string, number, nil or table expected, got {})",
                other.type_name()
            )))
        }
    }
    let end = matches!(arg.raw_get::<Value>(2)?, Value::Boolean(true));
    Ok((piece, end))
}

/// `ngx.arg` in a `body_filter`: the piece and the end as a table the script may change;
/// `nil` in every other phase.
pub(super) fn arg_table(lua: &mlua::Lua, state: &mut RequestState) -> mlua::Result<Value> {
    let Some(piece) = state.piece.as_mut() else {
        return Ok(Value::Nil);
    };
    if let Some(arg) = &piece.arg {
        return Ok(Value::Table(arg.clone()));
    }
    let arg = lua.create_table()?;
    arg.raw_set(1, lua.create_string(&piece.data)?)?;
    arg.raw_set(2, piece.eof)?;
    piece.arg = Some(arg.clone());
    Ok(Value::Table(arg))
}
