//! Each verb with the type of its answer, checked by the compiler on both
//! sides: `refreshctl` asks with an [`Ask`] and gets its `Reply`; the
//! daemon implements [`Answer`], whose methods return exactly those
//! replies, and [`answer`] turns a parsed [`Verb`] into the response. The
//! wire stays protocol version 1 (`{"v":1,"ok":true,"data":…}`).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::replies::{DriveEntry, NowAccepted, PauseReply, PlanReply, StatusReply, SurveyReply};
use crate::request::Verb;
use crate::response::Response;

/// A request and the type of its reply.
pub trait Ask {
    type Reply: Serialize + DeserializeOwned;
    fn verb(self) -> Verb;
}

/// `status`: per drive, its state, stale data, last sample and refresh.
#[derive(Debug, Clone, Copy, Default)]
pub struct Status;
/// `drives`: the drives and the trees on them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drives;
/// `plan`: what a refresh would rewrite, per drive.
#[derive(Debug, Clone, Copy, Default)]
pub struct Plan;
/// `survey`: the last sample per drive.
#[derive(Debug, Clone, Copy, Default)]
pub struct Survey;
/// `now`: sample now and refresh if degraded (or anyway, with `force`).
#[derive(Debug, Clone, Default)]
pub struct Now {
    pub drive: Option<String>,
    pub path: Option<String>,
    pub force: bool,
}
/// `pause` (`on`) or `resume`.
#[derive(Debug, Clone, Default)]
pub struct Pause {
    pub drive: Option<String>,
    pub on: bool,
}

impl Ask for Status {
    type Reply = StatusReply;
    fn verb(self) -> Verb {
        Verb::Status {}
    }
}

impl Ask for Drives {
    type Reply = Vec<DriveEntry>;
    fn verb(self) -> Verb {
        Verb::Drives {}
    }
}

impl Ask for Plan {
    type Reply = Vec<PlanReply>;
    fn verb(self) -> Verb {
        Verb::Plan {}
    }
}

impl Ask for Survey {
    type Reply = Vec<SurveyReply>;
    fn verb(self) -> Verb {
        Verb::Survey {}
    }
}

impl Ask for Now {
    type Reply = Vec<NowAccepted>;
    fn verb(self) -> Verb {
        Verb::Now {
            drive: self.drive,
            path: self.path,
            force: self.force,
        }
    }
}

impl Ask for Pause {
    type Reply = Vec<PauseReply>;
    fn verb(self) -> Verb {
        match self.on {
            true => Verb::Pause { drive: self.drive },
            false => Verb::Resume { drive: self.drive },
        }
    }
}

/// What answers each verb (the daemon). A refusal is a sentence.
pub trait Answer {
    fn status(&self) -> <Status as Ask>::Reply;
    fn drives(&self) -> <Drives as Ask>::Reply;
    fn plan(&self) -> <Plan as Ask>::Reply;
    fn survey(&self) -> <Survey as Ask>::Reply;
    fn now(&self, ask: Now) -> Result<<Now as Ask>::Reply, String>;
    fn pause(&self, ask: Pause) -> Result<<Pause as Ask>::Reply, String>;
}

/// The response to `verb`, from `to`.
pub fn answer(verb: Verb, to: &impl Answer) -> Response {
    match verb {
        Verb::Status {} => respond::<Status>(Ok(to.status())),
        Verb::Drives {} => respond::<Drives>(Ok(to.drives())),
        Verb::Plan {} => respond::<Plan>(Ok(to.plan())),
        Verb::Survey {} => respond::<Survey>(Ok(to.survey())),
        Verb::Now { drive, path, force } => respond::<Now>(to.now(Now { drive, path, force })),
        Verb::Pause { drive } => respond::<Pause>(to.pause(Pause { drive, on: true })),
        Verb::Resume { drive } => respond::<Pause>(to.pause(Pause { drive, on: false })),
    }
}

fn respond<A: Ask>(reply: Result<A::Reply, String>) -> Response {
    // Paths serialize as text (`pathtext`), so encoding does not fail; if
    // it ever did, the client gets the error, never a `null`.
    match reply.and_then(|r| {
        serde_json::to_value(r)
            .map_err(|e| format!("internal error: the reply cannot be encoded: {e}"))
    }) {
        Ok(v) => Response::ok(v),
        Err(e) => Response::err(e),
    }
}

/// Reads a response's data as the reply to `A`.
pub fn reply_of<A: Ask>(data: serde_json::Value) -> Result<A::Reply, serde_json::Error> {
    serde_json::from_value(data)
}
