//! The replies to requests, one module per message family. Each takes the request (and the
//! session or history it reads) and builds the reply's content; [`crate::worker`] and
//! [`crate::control`] send them.

pub mod execute;
pub mod history;
pub mod info;
pub mod introspect;
